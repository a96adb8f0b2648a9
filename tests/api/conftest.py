"""Fixtures for the API tests."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine


@pytest.fixture(autouse=True)
def script_admin(anonymous_admin: Any) -> None:
    """The endpoint tests call destructive endpoints as a script with no key would, so they opt in
    to DTQ_ALLOW_ANONYMOUS_ADMIN; test_auth.py, which tests that policy, overrides this."""


@pytest.fixture
def api(live_engine: Engine) -> APIClient:
    """A DRF test client on an engine pointed at this test's Redis and key prefix."""
    return APIClient()
