"""Poison messages, the DLQ cap and ttl expiry with a real worker: poison is quarantined after one
attempt, the DLQ keeps its newest DTQ_DLQ_MAXLEN entries, and an expired task never runs."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import counter, env, execs, pending, statuses

pytestmark = pytest.mark.slow


def test_poison_is_quarantined_the_dlq_is_capped_and_expired_tasks_never_run(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the worker (poison never takes it down or loops), the newest dead letters,
    # and every dead task's hash (DEAD_LETTERED even when its DLQ entry was trimmed away).
    keys = engine.keys
    unknown = engine.enqueue("no.such.type", queue="bad").id
    undecodable = engine.enqueue("failure.work", queue="bad").id
    redis_client.hset(keys.task(undecodable), "payload", "{not json")  # a producer bypassing validation
    failing = [engine.enqueue("dtq.fail", {"message": f"boom {i}"}, queue="bad").id for i in range(3)]
    expiring = engine.enqueue("failure.work", queue="bad", ttl_seconds=0.2).id
    expires_at = int(redis_client.hget(keys.task(expiring), "expires_at"))
    wait_for(lambda: time.time() * 1000 > expires_at)  # the ttl passes before any worker starts
    a = start_worker("--name", "a", "--queues", "bad", **env(DTQ_DLQ_MAXLEN=3))
    dead = [unknown, undecodable, *failing]
    wait_for(lambda: statuses(redis_client, keys, [*dead, expiring]) == ["DEAD_LETTERED"] * 5 + ["EXPIRED"],
             message=a.output())
    tasks = {tid: engine.get_task(tid) for tid in dead}
    assert all(t["attempt"] == 1 for t in tasks.values())  # permanent: a single attempt
    assert tasks[unknown]["errors"][0]["error"] == "dtq.UnknownTaskType"
    assert tasks[undecodable]["errors"][0]["error"] == "dtq.PayloadDecodeError"
    assert execs(redis_client, keys, undecodable) == 0 and execs(redis_client, keys, expiring) == 0
    # Five dead letters against a cap of three: the oldest two were trimmed, counted, hashes kept.
    entries = redis_client.xrange(keys.dlq())
    order = [e[1]["task_id"] for e in entries]
    assert len(entries) == 3 and set(order) <= set(dead) and counter(redis_client, keys, "dlq_trimmed") == 2
    assert pending(redis_client, keys, ["bad"]) == 0 and a.proc.poll() is None
