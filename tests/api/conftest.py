"""Fixtures for the API tests."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine


@pytest.fixture
def api(live_engine: Engine) -> APIClient:
    """A DRF test client on an engine pointed at this test's Redis and key prefix."""
    return APIClient()
