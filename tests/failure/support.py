"""Shared pieces of the failure suite: short timeouts for real worker processes, and reads of
what must survive (task status, pending entries, the handlers' side-effect log)."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from typing import Any

import redis

from dtq_core.keys import Keys

# Short timeouts so each crash scenario takes seconds (heartbeat < visibility, as validated).
FAST: dict[str, Any] = {
    "DTQ_VISIBILITY_TIMEOUT_S": 2,
    "DTQ_HEARTBEAT_INTERVAL_S": 0.5,
    "DTQ_DRAIN_TIMEOUT_S": 2,
    "DTQ_SCHEDULER_LOCK_TTL_S": 2,
    "DTQ_STALE_CLAIM_S": 2,
    "DTQ_RETRY_BASE_S": 0.1,
    "DTQ_RETRY_MAX_S": 0.5,
    "DTQ_TASK_MODULES": "tests.failure.handlers",
}


def env(**overrides: Any) -> dict[str, Any]:
    return {**FAST, **overrides}


def status(client: redis.Redis, keys: Keys, task_id: str) -> str | None:
    return client.hget(keys.task(task_id), "status")


def statuses(client: redis.Redis, keys: Keys, task_ids: Iterable[str]) -> list[str | None]:
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hget(keys.task(task_id), "status")
    return pipe.execute()


def task(client: redis.Redis, keys: Keys, task_id: str) -> dict[str, str]:
    return client.hgetall(keys.task(task_id))


def pending(client: redis.Redis, keys: Keys, queues: Iterable[str]) -> int:
    """Entries pending (delivered, not acknowledged) in the consumer group of every queue stream."""
    total = 0
    for queue in queues:
        for stream in keys.streams(queue):
            if client.exists(stream):
                total += int(client.xpending(stream, Keys.GROUP)["pending"])
    return total


def execs(client: redis.Redis, keys: Keys, task_id: str | None = None) -> Any:
    """Handler runs from the side-effect log: for one task, or all as {task_id: runs}."""
    key = f"{keys.prefix}:testlog:execs"
    if task_id is not None:
        return int(client.hget(key, task_id) or 0)
    return {k: int(v) for k, v in client.hgetall(key).items()}


def effects(client: redis.Redis, keys: Keys) -> dict[str, int]:
    return {k: int(v) for k, v in client.hgetall(f"{keys.prefix}:testlog:effects").items()}


def counter(client: redis.Redis, keys: Keys, name: str) -> int:
    return int(client.hget(keys.stats_counters(), name) or 0)


def registered(client: redis.Redis, keys: Keys, name: str) -> bool:
    return client.zscore(keys.workers(), name) is not None


def stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def cont(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def started(client: redis.Redis, keys: Keys, *task_ids: str) -> bool:
    """True once every task is RUNNING and its handler has begun (logged its execution)."""
    return all(status(client, keys, t) == "RUNNING" and execs(client, keys, t) >= 1 for t in task_ids)
