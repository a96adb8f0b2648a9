"""Fixtures for the API tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..redis_server import RedisServer


@pytest.fixture(autouse=True)
def script_admin(anonymous_admin: Any) -> None:
    """The endpoint tests call destructive endpoints as a script with no key would, so they opt in
    to DTQ_ALLOW_ANONYMOUS_ADMIN; test_auth.py, which tests that policy, overrides this."""


@pytest.fixture
def api(live_engine: Engine) -> APIClient:
    """A DRF test client on an engine pointed at this test's Redis and key prefix."""
    return APIClient()


@pytest.fixture
def frozen_redis(tmp_path: Path, settings: Any) -> Iterator[RedisServer]:
    """A Redis that accepts connections and never answers (SIGSTOPped): the API must give up in time."""
    with RedisServer(tmp_path / "frozen", appendonly=False) as server:
        settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": "frozen"}
        server.pause()
        try:
            yield server
        finally:
            server.resume()
