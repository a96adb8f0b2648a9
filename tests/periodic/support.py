"""Helpers for the periodic tests: two operators acting at once (two API processes), and one round
of the leader's firing as a worker runs it."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.worker.periodic import PeriodicFirer
from dtq_core.worker.store import WorkerStore


def twin(engine: Engine) -> Engine:
    """A second API process on the same Redis and key prefix, on the same clock."""
    return Engine(engine.config, clock=engine.clock)


def at_once(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls in threads released together; their results (or the exceptions they raised)."""
    barrier = threading.Barrier(len(calls))
    out: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            out[i] = call()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, call)) for i, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return out


def leader_round(engine: Engine, name: str, worker: str) -> int:
    """One round of dtq_core/worker/periodic.py over the schedule's partition, by `worker` (which
    must hold the partition's lease), on the engine's clock: the tasks it created."""
    tag = engine.periodic.names()[name]

    async def fire() -> int:
        store = WorkerStore(engine.config, async_client(engine.config, read_timeout_s=10), engine.clock, worker)
        try:
            return await PeriodicFirer(store).fire_due({tag: 0})
        finally:
            await store.aclose()

    return asyncio.run(fire())
