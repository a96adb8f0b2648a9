"""Fixtures for the Django Tasks backend tests: the backend pointed at the test Redis."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from dtq_core.django_tasks.compat import task_backends
from dtq_core.engine import Engine

BACKEND = "dtq_core.django_tasks.DtqBackend"


@pytest.fixture
def tasks_settings(live_engine: Any, settings: Any) -> Any:
    """TASKS with a second queue, on this test's Redis and key prefix (through settings.DTQ)."""
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "emails"], "OPTIONS": {}}}
    return settings


@pytest.fixture
def backend(tasks_settings: Any) -> Any:
    return task_backends["default"]


def task_keys(redis_client: redis.Redis, engine: Engine) -> list[str]:
    """The task records in Redis, in every partition."""
    return list(redis_client.scan_iter(match=engine.keys.partition("*") + "task:*"))
