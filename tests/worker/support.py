"""Helpers for the worker's tests: the partitions of a queue as the worker serves them, and the
store's calls as the worker makes them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import redis

from dtq_core.clock import Clock, SystemClock
from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.worker.executor import Row
from dtq_core.worker.store import Partition, WorkerStore


def store(config: DtqConfig, worker_id: str = "w-test", clock: Clock | None = None) -> WorkerStore:
    return WorkerStore(config, async_client(config, read_timeout_s=10), clock or SystemClock(), worker_id)


def tag(engine: Engine, queue: str) -> str:
    """The tag of a queue of one partition (registered when it is not yet)."""
    (only,) = engine.registry.ensure(queue).all_tags
    return only


def partitions(engine: Engine, *queues: str) -> list[Partition]:
    """Every partition of the queues (registered when they are not yet)."""
    return [p for queue in queues for p in Partition.all_of(engine.registry.ensure(queue))]


async def fetch(worker_store: WorkerStore, served: list[Partition], count: int) -> list[Row]:
    """Fetch up to `count` from each partition (one fetchTasks call each, one round trip)."""
    return (await worker_store.fetch([(p, count) for p in served])).rows


async def until(check: Callable[[], bool], what: str, timeout: float = 30) -> None:
    """Poll a blocking check (in a thread, off the event loop a Worker runs on) until it holds."""
    deadline = time.monotonic() + timeout
    while not await asyncio.to_thread(check):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


class AfterCall(redis.Redis):
    """A real client that runs `then` once, right after the first command naming `key` (and, when
    `command` is set, being that command) has been answered by Redis: a fault or a cancel injected
    at one exact point of a caller's exchange."""

    key = ""
    command: str | None = None
    then: Callable[[], None] | None = None

    def execute_command(self, *args: Any, **options: Any) -> Any:
        reply = super().execute_command(*args, **options)
        then = self.then
        if then is not None and self.key in args and (self.command is None or args[0] == self.command):
            self.then = None
            then()
        return reply
