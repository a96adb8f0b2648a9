"""Reads for the flow-control tests: the runs the handlers logged, and samples of the queue's
RUNNING count taken from outside the workers; and the worker's store calls (fetch, complete,
promote) as a worker makes them, on the real clock."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.worker.executor import Completion
from dtq_core.worker.store import Fetched, WorkerStore

from ..worker.support import partitions, store

ENV: dict[str, Any] = {
    "DTQ_VISIBILITY_TIMEOUT_S": 2,
    "DTQ_HEARTBEAT_INTERVAL_S": 0.5,
    "DTQ_DRAIN_TIMEOUT_S": 2,
    "DTQ_SCHEDULER_LOCK_TTL_S": 2,
    "DTQ_STALE_CLAIM_S": 2,
    "DTQ_TASK_MODULES": "tests.limits.handlers",
}


def run(coro_fn: Callable[[WorkerStore], Awaitable[Any]], config: DtqConfig, worker_id: str = "w-test") -> Any:
    """One store call (or a few) of a worker named worker_id, on a store of its own."""
    async def go() -> Any:
        s = store(config, worker_id)
        try:
            return await coro_fn(s)
        finally:
            await s.aclose()
    return asyncio.run(go())


def fetch(engine: Engine, config: DtqConfig, queue: str, n: int = 10, worker_id: str = "w-test") -> Fetched:
    return run(lambda s: s.fetch([(p, n) for p in partitions(engine, queue)]), config, worker_id)


def complete(config: DtqConfig, *completions: Completion) -> list[Any]:
    return run(lambda s: s.complete(list(completions)), config)


def promote(engine: Engine, config: DtqConfig, queue: str, client: Any) -> dict[str, int]:
    """Queue what is due in the queue's schedule, as the scheduler's leader does."""
    tags = [p.tag for p in partitions(engine, queue)]
    for t in tags:
        client.set(engine.keys.lock(t), "leader")
    return run(lambda s: s.promote_due(tags), config, "leader")


def runs(client: redis.Redis, prefix: str) -> list[dict[str, Any]]:
    return [json.loads(r) for r in client.lrange(f"{prefix}:testlog:runs", 0, -1)]


def intervals(client: redis.Redis, prefix: str) -> list[tuple[float, float, str | None, str]]:
    """(start, end, group, task) of every finished run."""
    starts: dict[tuple[str, int], dict[str, Any]] = {}
    out = []
    for r in runs(client, prefix):
        key = (r["task"], r["attempt"])
        if r["kind"] == "start":
            starts[key] = r
        elif key in starts:
            out.append((starts[key]["at"], r["at"], r["group"], r["task"]))
    return out


def most_at_once(spans: list[tuple[float, float, Any, Any]]) -> int:
    events = sorted([(s, 1) for s, *_ in spans] + [(e, -1) for _, e, *_ in spans], key=lambda x: (x[0], x[1]))
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


class Sampler:
    """Samples the queue's RUNNING count (engine.limits usage, and the task records' status) from
    outside the workers, in a thread, until stopped."""

    def __init__(self, engine: Engine, queue: str, task_ids: list[str]) -> None:
        self.engine, self.queue, self.task_ids = engine, queue, task_ids
        self.usage_max = 0
        self.status_max = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        keys = self.engine.keys
        while not self._stop.is_set():
            self.usage_max = max(self.usage_max, self.engine.limits.get(self.queue)["usage"]["running"])
            pipe = self.engine.client.pipeline(transaction=False)
            for tid in self.task_ids:
                pipe.hget(keys.task(tid), "status")
            self.status_max = max(self.status_max, sum(1 for s in pipe.execute() if s == "RUNNING"))
            self.samples += 1
            self._stop.wait(0.01)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
