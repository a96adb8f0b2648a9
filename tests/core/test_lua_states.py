"""Walk every status through the claim, cancel and completion scripts: legal moves happen,
illegal ones are absorbed or refused without changing the task hash."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from typing import Any

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import CancelRequested, TaskTerminal
from dtq_core.keys import Keys, tag_of
from dtq_core.task import Outcome, Status
from dtq_core.worker.executor import Completion, Row

from ..worker.support import fetch, partitions, store

ALL = list(Status)


def _normal_stream(engine: Engine, task_id: str) -> str:
    """The default queue's normal stream in the task's partition (the id carries its tag)."""
    return engine.keys.stream(tag_of(task_id), "default", "normal")


def _put_in_state(engine: Engine, redis_client: redis.Redis, status: Status) -> tuple[str, str, str]:
    """Enqueue a task, then force its hash into `status`; return (task id, stream, entry id)."""
    out = engine.tasks.enqueue("dtq.echo", {"v": 1})
    stream = _normal_stream(engine, out.id)
    entry_id = redis_client.xrange(stream)[0][0]
    attempt = 0 if status in (Status.QUEUED, Status.PENDING) else 1
    redis_client.hset(engine.keys.task(out.id), mapping={"status": status.value, "attempt": attempt})
    return out.id, stream, entry_id


async def _deliver_and_claim(engine: Engine, config: DtqConfig) -> list[Row]:
    """One worker fetch (fetchTasks) of the default queue's partitions, as w-test."""
    worker_store = store(config)
    try:
        return await fetch(worker_store, partitions(engine, "default"), 10)
    finally:
        await worker_store.aclose()


@pytest.mark.parametrize("status", ALL, ids=lambda s: s.value)
def test_claim_runs_only_a_queued_task(engine: Engine, config: DtqConfig, redis_client: redis.Redis,
                                       status: Status) -> None:
    task_id, stream, entry_id = _put_in_state(engine, redis_client, status)
    before = redis_client.hgetall(engine.keys.task(task_id))
    rows = asyncio.run(_deliver_and_claim(engine, config))
    after = redis_client.hgetall(engine.keys.task(task_id))
    if status is Status.QUEUED:
        assert [r.task_id for r in rows] == [task_id]
        assert after["status"] == "RUNNING" and after["attempt"] == "1" and after["entry_id"] == entry_id
        assert after["worker_id"] == "w-test"
        assert redis_client.xpending(stream, Keys.GROUP)["pending"] == 1
    else:
        # A duplicate or stale entry: acknowledged and deleted, the task untouched.
        assert rows == [] and after == before
        assert redis_client.xpending(stream, Keys.GROUP)["pending"] == 0 and redis_client.xlen(stream) == 0


@pytest.mark.parametrize("status", ALL, ids=lambda s: s.value)
def test_cancel_in_every_state(engine: Engine, redis_client: redis.Redis, status: Status) -> None:
    task_id, _, _ = _put_in_state(engine, redis_client, status)
    key = engine.keys.task(task_id)
    if status in (Status.PENDING, Status.QUEUED, Status.RETRYING):
        result = engine.tasks.cancel(task_id, Actor.cli())
        assert result.cancelled and redis_client.hget(key, "status") == "CANCELLED"
    elif status is Status.RUNNING:
        result = engine.tasks.cancel(task_id, Actor.cli())
        assert not result.cancelled and redis_client.hget(key, "cancel_requested") == "1"
        assert redis_client.hget(key, "status") == "RUNNING"
        with pytest.raises(CancelRequested):
            engine.tasks.cancel(task_id, Actor.cli())
    else:
        before = redis_client.hgetall(key)
        with pytest.raises(TaskTerminal):
            engine.tasks.cancel(task_id, Actor.cli())
        assert redis_client.hgetall(key) == before


def test_a_cancelled_queued_task_never_starts(engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo")
    engine.tasks.cancel(out.id, Actor.cli())
    rows = asyncio.run(_deliver_and_claim(engine, config))
    assert rows == [] and engine.tasks.get(out.id)["status"] == "CANCELLED"


async def _claim_then_complete(engine: Engine, config: DtqConfig, tamper: Any) -> tuple[list[str], Row]:
    worker_store = store(config)
    try:
        (row,) = await fetch(worker_store, partitions(engine, "default"), 1)
        tamper(row)
        statuses = await worker_store.complete([Completion(row, Outcome.SUCCEEDED, result_json='"ok"')])
        return statuses, row
    finally:
        await worker_store.aclose()


def test_completion_is_fenced_against_a_newer_attempt(engine: Engine, config: DtqConfig,
                                                      redis_client: redis.Redis) -> None:
    # A peer reclaimed the entry and started attempt 2: the old owner's result must not land.
    out = engine.tasks.enqueue("dtq.echo")
    stream = _normal_stream(engine, out.id)
    key = engine.keys.task(out.id)
    statuses, _ = asyncio.run(_claim_then_complete(engine, config, lambda row: redis_client.hset(key, "attempt", 2)))
    assert statuses == ["fenced"]
    assert redis_client.hget(key, "status") == "RUNNING"
    assert redis_client.get(engine.keys.result(out.id)) is None
    assert redis_client.xpending(stream, Keys.GROUP)["pending"] == 1  # still the new owner's to ACK


def test_completion_writes_result_acks_and_deletes_the_entry(engine: Engine, config: DtqConfig,
                                                             redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo")
    stream = _normal_stream(engine, out.id)
    statuses, _ = asyncio.run(_claim_then_complete(engine, config, lambda row: None))
    assert statuses == ["SUCCEEDED"]
    assert engine.tasks.get(out.id)["result"] == "ok"
    assert redis_client.xlen(stream) == 0 and redis_client.xpending(stream, Keys.GROUP)["pending"] == 0
    ttl = redis_client.pttl(engine.keys.result(out.id))
    assert 0 < ttl <= config.result_retention_s * 1000


def test_a_task_reclaimed_into_a_paused_queue_goes_back_queued_and_says_so(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    # Its worker died while the queue was paused: the reclaim counts the lost attempt and puts
    # the task back at the tail, and that RUNNING -> QUEUED change is published like any other.
    config = dataclasses.replace(config, visibility_timeout_s=0.1, heartbeat_interval_s=0.05)
    out = engine.tasks.enqueue("dtq.echo")
    stream = _normal_stream(engine, out.id)
    asyncio.run(_deliver_and_claim(engine, config))  # w-test runs attempt 1, then goes silent
    engine.queues.pause("default", Actor.cli())
    deadline = time.monotonic() + 5
    while redis_client.xpending_range(stream, Keys.GROUP, "-", "+", 1)[0]["time_since_delivered"] <= 150:
        assert time.monotonic() < deadline
        time.sleep(0.02)  # until idle past the 0.1 s visibility timeout
    pubsub = redis_client.pubsub()
    pubsub.subscribe(engine.keys.events())
    assert pubsub.get_message(timeout=2)["type"] == "subscribe"  # listening before the reclaim

    async def reclaim() -> list[Row]:
        peer = store(config, "peer")
        try:
            return await peer.reclaim(partitions(engine, "default"), 10)
        finally:
            await peer.aclose()

    assert asyncio.run(reclaim()) == []
    task = redis_client.hgetall(engine.keys.task(out.id))
    assert task["status"] == "QUEUED" and task["attempt"] == "1" and "dtq.WorkerLost" in task["errors"]
    message = pubsub.get_message(timeout=2)
    pubsub.close()
    assert message is not None
    event = json.loads(message["data"])
    assert (event["type"], event["task_id"], event["status"], event["attempt"]) == ("task.queued", out.id, "QUEUED", 1)
