"""Helpers for the API and CLI tests: real dead letters made by a real (in-process) worker."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import dtq_tasks  # noqa: F401  registers the built-in task types
from dtq_core import registry
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
    if registry.get(type) is None:
        # Junk that got in while submit still accepted it (a fresh install, or the opt-out).
        engine = Engine(dataclasses.replace(engine.config, accept_unknown_types=True), client=engine.client)
    subs = [engine.tasks.validate(type, payload, queue=queue, max_attempts=1, **options) for _ in range(count)]
    ids = [e.id for e in engine.tasks.enqueue_many(subs)]
    drain(engine.config, queues=[queue])
    return ids


def serve_types(engine: Engine, *types: str) -> None:
    """Register task types as a worker serving them does at start, so submit accepts them."""
    now = engine.clock.now_ms()
    engine.scripts("registerTypes", keys=[engine.keys.task_types()], args=[now, 0, *types])
    engine.tasks.served_types()  # this engine's cached copy now has them (another process's: within 0.5 s)


def audit_entries(engine: Engine) -> list[dict[str, Any]]:
    return engine.audit.list(limit=500).items


def assert_error(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code and error["message"] and error["request_id"] == response["X-Request-ID"]
    return error
