"""Poison messages, the DLQ cap and ttl expiry with a real worker: poison is quarantined after one
attempt, the DLQ keeps its newest DTQ_DLQ_MAXLEN entries, and an expired task never runs."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from django.test import Client

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection

from ..conftest import WorkerProcess, wait_for
from .support import counter, dead_letters, env, execs, pending, started, statuses

pytestmark = pytest.mark.slow


def test_poison_is_quarantined_the_dlq_is_capped_and_expired_tasks_never_run(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the worker (poison never takes it down or loops), the newest dead letters,
    # and every dead task's hash (DEAD_LETTERED even when its DLQ entry was trimmed away).
    keys = engine.keys
    unknown = engine.tasks.enqueue("no.such.type", queue="bad").id
    undecodable = engine.tasks.enqueue("failure.work", queue="bad").id
    redis_client.hset(keys.task(undecodable), "payload", "{not json")  # a producer bypassing validation
    failing = [engine.tasks.enqueue("dtq.fail", {"message": f"boom {i}"}, queue="bad").id for i in range(3)]
    expiring = engine.tasks.enqueue("failure.work", queue="bad", ttl_seconds=0.2).id
    expires_at = int(redis_client.hget(keys.task(expiring), "expires_at"))
    wait_for(lambda: time.time() * 1000 > expires_at)  # the ttl passes before any worker starts
    a = start_worker("--name", "a", "--queues", "bad", **env(DTQ_DLQ_MAXLEN=3))
    dead = [unknown, undecodable, *failing]
    wait_for(lambda: statuses(redis_client, keys, [*dead, expiring]) == ["DEAD_LETTERED"] * 5 + ["EXPIRED"],
             message=a.output())
    tasks = {tid: engine.tasks.get(tid) for tid in dead}
    assert all(t["attempt"] == 1 for t in tasks.values())  # permanent: a single attempt
    assert tasks[unknown]["errors"][0]["error"] == "dtq.UnknownTaskType"
    assert tasks[undecodable]["errors"][0]["error"] == "dtq.PayloadDecodeError"
    assert execs(redis_client, keys, undecodable) == 0 and execs(redis_client, keys, expiring) == 0
    # Five dead letters against a cap of three: the oldest two were trimmed, counted, hashes kept.
    entries = dead_letters(redis_client, keys)
    order = [e[1]["task_id"] for e in entries]
    assert len(entries) == 3 and set(order) <= set(dead) and counter(redis_client, keys, "dlq_trimmed") == 2
    assert pending(redis_client, keys, ["bad"]) == 0 and a.proc.poll() is None


def test_a_corrupt_task_record_is_quarantined_alone_and_the_rest_complete(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: every other completion of the worker, and the worker itself. A task's
    # errors field is corrupted by hand while it runs; its failure cannot be recorded, so it is
    # quarantined (DLQ, dtq.CorruptRecord, counted on /metrics) instead of failing the whole
    # completion batch, which the worker would resend forever while later tasks stayed RUNNING.
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "corrupt", **env())
    bad = engine.tasks.enqueue("failure.gated", {"gate": "bad", "fail": "handler broke"}, queue="corrupt").id
    good_ok = [engine.tasks.enqueue("failure.gated", {"gate": "good"}, queue="corrupt").id for _ in range(3)]
    good_fail = [engine.tasks.enqueue("failure.gated", {"gate": "good", "fail": "expected"}, queue="corrupt").id
                 for _ in range(2)]
    wait_for(lambda: started(redis_client, keys, bad, *good_ok, *good_fail), message=a.output())
    redis_client.hset(keys.task(bad), "errors", '[{"attempt": 1, "error": "Trunc')  # cut off mid-write
    redis_client.set(f"{keys.prefix}:testlog:gate:bad", 1)
    finished = f"{keys.prefix}:testlog:finished"
    wait_for(lambda: bad in redis_client.lrange(finished, 0, -1), message=a.output())
    redis_client.set(f"{keys.prefix}:testlog:gate:good", 1)  # completed after the bad one, or with it
    later = engine.tasks.enqueue("dtq.echo", {"after": True}, queue="corrupt").id
    wait_for(lambda: statuses(redis_client, keys, [*good_ok, *good_fail, later])
             == ["SUCCEEDED"] * 3 + ["DEAD_LETTERED"] * 2 + ["SUCCEEDED"], timeout=20, message=a.output())
    wait_for(lambda: statuses(redis_client, keys, [bad]) == ["DEAD_LETTERED"], message=a.output())
    task = engine.tasks.get(bad)
    assert task["errors"][-1]["error"] == "dtq.CorruptRecord"
    assert "errors is not a JSON list" in task["last_error"]
    assert redis_client.hget(keys.task(bad), "errors_corrupt") == '[{"attempt": 1, "error": "Trunc'  # kept
    (entry,) = [e for e in engine.dlq.list(queue="corrupt").items if e["task_id"] == bad]
    assert entry["error_class"] == "dtq.CorruptRecord" and "errors is not a JSON list" in entry["error"]
    assert counter(redis_client, keys, "corrupt_records") == 1
    metrics = Client().get("/metrics").content.decode()
    assert "dtq_corrupt_records_total 1.0" in metrics
    assert pending(redis_client, keys, ["corrupt"]) == 0 and a.proc.poll() is None
    assert f"task_id={bad} queue=corrupt attempt=1 worker_id=a quarantined as dtq.CorruptRecord" in a.output()
    # Retried from the DLQ, the repaired record runs and fails like any task: its errors list reads again.
    assert engine.dlq.retry(DlqSelection(task_ids=(bad,)), Actor.cli()) == 1
    wait_for(lambda: engine.tasks.get(bad)["status"] == "DEAD_LETTERED" and engine.tasks.get(bad)["attempt"] == 1,
             message=a.output())
    assert [e["error"] for e in engine.tasks.get(bad)["errors"]] == ["dtq.CorruptRecord", "RuntimeError"]
