"""Helpers for the API and CLI tests: real dead letters made by a real (in-process) worker."""

from __future__ import annotations

import asyncio
from typing import Any

import dtq_tasks  # noqa: F401  registers the built-in task types
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.worker import Worker


def drain(config: DtqConfig, *, queues: list[str] | None = None, concurrency: int = 50) -> None:
    """Run a burst worker in this process until no work is left."""
    asyncio.run(Worker(config, queues=queues, concurrency=concurrency, burst=True, name="test-burst").run())


def make_dead_letters(engine: Engine, count: int, *, queue: str = "default", type: str = "dtq.fail",
                      message: str = "boom", **options: Any) -> list[str]:
    """Submit `count` failing tasks (one attempt each), run them, return their task ids."""
    payload = {"message": message} if type == "dtq.fail" else {}
    subs = [engine.validate(type, payload, queue=queue, max_attempts=1, **options) for _ in range(count)]
    ids = [e.id for e in engine.enqueue_many(subs)]
    drain(engine.config, queues=[queue])
    return ids


def audit_entries(engine: Engine) -> list[dict[str, Any]]:
    return engine.audit_list(limit=500).items


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"] and error["request_id"] == response["X-Request-ID"]
    return error
