"""What a task record keeps, and for how long, around the DLQ, purges, cancels and long waits:
a record refreshed on every update, never expiring before its task is due, and never pointing at
a dead letter that is gone."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import dtq_tasks
from dtq_core import registry
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection

from .support import tag
from .test_worker_behaviour import make_engine, run_burst

OPERATOR = Actor.cli()
CALLS: list[int] = []


@pytest.fixture(autouse=True)
def cancelling_handler(config: DtqConfig) -> Iterator[None]:
    CALLS.clear()

    def cancel_then_fail(payload: Any) -> None:
        # The cancel lands while this attempt runs, then the attempt fails retryably at once,
        # well before the worker's cancel watcher (every 0.25 s) could act on it.
        ctx = dtq_tasks.current_task()
        assert ctx is not None
        CALLS.append(ctx.attempt)
        Engine(DtqConfig.from_mapping(payload["config"])).tasks.cancel(ctx.task_id, Actor.cli())
        if payload["retryable"]:
            raise dtq_tasks.RetryableError("flaky")
        raise ValueError("broken")

    registry.register("test.cancel_then_fail", cancel_then_fail)
    yield


def ttl_s(client: redis.Redis, engine: Engine, task_id: str) -> float:
    return int(client.pttl(engine.keys.task(task_id))) / 1000


@pytest.mark.parametrize("retryable", [True, False])
def test_a_cancel_accepted_while_the_attempt_ran_wins_over_its_retry_or_dead_letter(
        config: DtqConfig, retryable: bool) -> None:
    engine, cfg = make_engine(config, retry_base_s=0.01)
    task_id = engine.tasks.enqueue("test.cancel_then_fail", {"config": cfg.as_settings(), "retryable": retryable},
                                   max_attempts=3).id
    run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "CANCELLED" and task["cancel_requested"]
    assert CALLS == [1]  # it never ran again
    assert [e["error"] for e in task["errors"]] == ["dtq_tasks.RetryableError" if retryable else "ValueError"]
    assert engine.dlq.count() == 0


def test_a_task_delayed_past_the_retention_keeps_its_record_until_it_runs(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, task_retention_s=2)
    task_id = engine.tasks.enqueue("dtq.echo", {"late": True}, delay_seconds=4).id
    assert ttl_s(redis_client, engine, task_id) > 5.5  # the 4 s wait plus the 2 s retention
    assert engine.tasks.get(task_id)["status"] == "PENDING"


def test_a_retry_due_after_the_retention_keeps_its_record_until_it_runs(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, task_retention_s=2, retry_base_s=60, retry_max_s=60)
    task_id = engine.tasks.enqueue("dtq.flaky", {"fail_times": 1}).id
    run_burst(cfg, max_tasks=1)  # the first attempt only, however soon the jitter makes the retry due
    task = engine.tasks.get(task_id)
    assert task["status"] == "RETRYING"
    due_in_s = redis_client.zscore(engine.keys.schedule(tag(engine, "default")), task_id) / 1000 - time.time()
    assert ttl_s(redis_client, engine, task_id) >= due_in_s + 2 - 0.5


def dead_letters(engine: Engine, cfg: DtqConfig, n: int, queue: str = "default") -> list[str]:
    ids = [engine.tasks.enqueue("dtq.fail", {"retryable": False}, queue=queue, max_attempts=3).id for _ in range(n)]
    run_burst(cfg)
    return ids


def test_a_discard_refreshes_the_record_and_its_event_carries_the_attempt(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    (task_id,) = dead_letters(engine, cfg, 1)
    redis_client.pexpire(engine.keys.task(task_id), 60_000)  # as if it had waited in the DLQ for days
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(engine.keys.events())
    pubsub.get_message(timeout=1)
    entry_id = engine.tasks.get(task_id)["dlq_entry_id"]
    assert engine.dlq.discard(DlqSelection(ids=(entry_id,)), OPERATOR) == 1
    assert ttl_s(redis_client, engine, task_id) > cfg.task_retention_s - 60
    message = pubsub.get_message(timeout=5)
    pubsub.close()
    event = json.loads(message["data"])
    assert event["type"] == "dlq.discarded" and event["task_id"] == task_id and event["attempt"] == 1


def test_a_purge_refreshes_the_records_it_cancels(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, _ = make_engine(config)
    task_id = engine.tasks.enqueue("dtq.echo", {}, queue="purged").id
    redis_client.pexpire(engine.keys.task(task_id), 60_000)
    assert engine.queues.purge("purged", OPERATOR) == 1
    assert engine.tasks.get(task_id)["status"] == "CANCELLED"
    # A cancelled task is kept like a succeeded one (includes/retain.lua).
    assert ttl_s(redis_client, engine, task_id) > config.succeeded_retention_s - 60


def test_a_task_expired_at_its_claim_gets_a_fresh_retention(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("dtq.echo", {}, ttl_seconds=1).id
    redis_client.pexpire(engine.keys.task(task_id), 60_000)
    deadline = time.monotonic() + 5
    while engine.tasks.get(task_id)["expires_at"] and time.time() * 1000 < _ms(engine.tasks.get(task_id)["expires_at"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    run_burst(cfg)
    assert engine.tasks.get(task_id)["status"] == "EXPIRED"
    assert ttl_s(redis_client, engine, task_id) > cfg.succeeded_retention_s - 60


def test_a_dead_letter_evicted_by_the_cap_is_no_longer_offered_on_its_task(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, dlq_maxlen=2)
    ids = dead_letters(engine, cfg, 4)
    tasks = [engine.tasks.get(t) for t in ids]
    kept = {e["task_id"] for e in engine.dlq.list(limit=10).items}
    assert len(kept) == 2
    for task in tasks:
        assert task["status"] == "DEAD_LETTERED"
        if task["id"] in kept:
            assert task["dlq_entry_id"] and "dlq_trimmed_at" not in task
        else:
            assert "dlq_entry_id" not in task and task["dlq_trimmed_at"].endswith("Z")


def _ms(iso_time: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(iso_time.replace("Z", "+00:00")).timestamp() * 1000



def test_cancelled_and_purged_waiting_tasks_are_counted_as_cancelled_outcomes(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, _ = make_engine(config)
    engine.tasks.cancel(engine.tasks.enqueue("dtq.echo", {}).id, Actor.cli())
    engine.tasks.cancel(engine.tasks.enqueue("dtq.echo", {}, delay_seconds=60).id, Actor.cli())
    for _ in range(3):
        engine.tasks.enqueue("dtq.sleep", {"seconds": 1}, queue="purged")
    engine.tasks.enqueue("dtq.echo", {}, queue="purged", priority="high")
    assert engine.queues.purge("purged", OPERATOR) == 4
    counts = {**redis_client.hgetall(engine.keys.stats_tasks(tag(engine, "default"))),
              **redis_client.hgetall(engine.keys.stats_tasks(tag(engine, "purged")))}
    assert counts == {"default|dtq.echo|cancelled": "2", "purged|dtq.sleep|cancelled": "3",
                      "purged|dtq.echo|cancelled": "1"}


def test_an_idempotency_key_still_deduplicates_after_its_task_record_expired(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    # Only possible with DTQ_TASK_RETENTION_S shorter than DTQ_IDEM_TTL_S (check dtq.W002): the key
    # still stands for the first task, so its side effects are not repeated by a second one.
    engine, _ = make_engine(config)
    first = engine.tasks.enqueue("dtq.echo", {}, idempotency_key="order-7")
    redis_client.delete(engine.keys.task(first.id))
    again = engine.tasks.enqueue("dtq.echo", {}, idempotency_key="order-7")
    assert again.id == first.id and not again.created and again.status == "UNKNOWN"
    assert redis_client.xlen(engine.keys.stream(tag(engine, "default"), "default", "normal")) == 1


def test_a_none_result_is_a_flag_of_the_record_not_a_key(config: DtqConfig, redis_client: redis.Redis) -> None:
    def returns_none(payload: Any) -> None:
        return None

    registry.register("test.returns_none", returns_none)
    engine, cfg = make_engine(config)
    nothing = engine.tasks.enqueue("test.returns_none").id
    something = engine.tasks.enqueue("dtq.echo", {"a": 1}).id
    run_burst(cfg)
    assert not redis_client.exists(engine.keys.result(nothing))
    assert redis_client.hget(engine.keys.task(nothing), "result_null") == "1"
    view = engine.tasks.get(nothing)
    assert view["status"] == "SUCCEEDED" and "result" in view and view["result"] is None
    assert redis_client.get(engine.keys.result(something)) == '{"a":1}'
    assert redis_client.hget(engine.keys.task(something), "result_null") is None  # only a null result sets it
    assert engine.tasks.get(something)["result"] == {"a": 1}
