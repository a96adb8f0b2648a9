"""Unique tasks (issue 22): while_active, throttle and debounce, enforced by the submit script,
under one submitter and under many threads at once."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import pytest
import redis

from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import ValidationError
from dtq_core.keys import tag_of
from dtq_core.task import Outcome
from dtq_core.worker.executor import Completion

from ..api.support import drain
from ..conftest import wait_for
from ..limits.support import complete, fetch, promote

ACTOR = Actor(name="cli:test", source="cli")


def submit(engine: Engine, payload: Any = None, **options: Any) -> Any:
    return engine.tasks.enqueue("dtq.echo", payload, queue="uq", **options)


def only_task_ids(engine: Engine) -> list[str]:
    return [t["id"] for t in engine.tasks.list(queue="uq", limit=100).items]


# -- while_active ------------------------------------------------------------------------------

def test_while_active_returns_the_waiting_task(engine: Engine) -> None:
    first = submit(engine, {"n": 1}, unique_key="report-7", unique_mode="while_active")
    second = submit(engine, {"n": 2}, unique_key="report-7", unique_mode="while_active")
    assert first.created and first.unique == {"existing": False, "mode": "while_active", "key": "report-7"}
    assert not second.created and second.id == first.id and second.status == "QUEUED"
    assert second.unique == {"existing": True, "mode": "while_active", "key": "report-7"}
    task = engine.tasks.get(first.id)
    assert task["payload"] == {"n": 1} and task["unique_key"] == "report-7" and task["unique_mode"] == "while_active"
    assert only_task_ids(engine) == [first.id]


def test_while_active_holds_a_delayed_task_and_frees_the_key_once_it_ends(engine: Engine) -> None:
    first = submit(engine, unique_key="k", unique_mode="while_active", delay_seconds=60)
    assert submit(engine, unique_key="k", unique_mode="while_active").id == first.id  # PENDING holds it
    engine.tasks.cancel(first.id, ACTOR)  # CANCELLED: any finished state frees it
    second = submit(engine, {"n": 2}, unique_key="k", unique_mode="while_active")
    assert second.created and second.id != first.id and second.unique["existing"] is False
    assert submit(engine, unique_key="k", unique_mode="while_active").id == second.id


@pytest.mark.parametrize(("ttype", "payload", "ended"), [("dtq.echo", {}, "SUCCEEDED"),
                                                          ("dtq.fail", {"message": "no"}, "DEAD_LETTERED")])
def test_while_active_frees_the_key_when_a_worker_finishes_the_task(engine: Engine, ttype: str, payload: Any,
                                                                   ended: str) -> None:
    first = engine.tasks.enqueue(ttype, payload, queue="uq", max_attempts=1, unique_key="k", unique_mode="while_active")
    drain(engine.config, queues=["uq"])
    assert engine.tasks.get(first.id)["status"] == ended
    again = engine.tasks.enqueue(ttype, payload, queue="uq", unique_key="k", unique_mode="while_active")
    assert again.created and again.id != first.id


def test_while_active_frees_the_key_of_a_purged_task(engine: Engine) -> None:
    first = submit(engine, unique_key="k", unique_mode="while_active")
    assert engine.queues.purge("uq", ACTOR) == 1
    assert engine.tasks.get(first.id)["status"] == "CANCELLED"
    assert submit(engine, unique_key="k", unique_mode="while_active").created


def test_while_active_frees_the_key_of_a_task_that_expired_unrun(config: DtqConfig) -> None:
    # Submitted by a clock 10 s behind: its ttl of 1 s has passed when the worker fetches it.
    engine = Engine(config, clock=FakeClock(start_ms=int(time.time() * 1000) - 10_000))
    first = submit(engine, unique_key="k", unique_mode="while_active", ttl_seconds=1)
    drain(engine.config, queues=["uq"])
    assert engine.tasks.get(first.id)["status"] == "EXPIRED"
    assert submit(engine, unique_key="k", unique_mode="while_active").created


def test_while_active_frees_the_key_once_the_holders_record_is_gone(engine: Engine, redis_client: redis.Redis
                                                                   ) -> None:
    first = submit(engine, unique_key="k", unique_mode="while_active")
    redis_client.delete(engine.keys.task(first.id))  # as its retention would, or a lost record
    assert submit(engine, unique_key="k", unique_mode="while_active").created


def test_while_active_cap_frees_a_key_whose_task_never_ends(engine: Engine) -> None:
    first = submit(engine, unique_key="k", unique_mode="while_active", unique_window_s=10)
    engine.clock.advance(9.9)
    assert submit(engine, unique_key="k", unique_mode="while_active", unique_window_s=10).id == first.id
    engine.clock.advance(0.2)  # the cap (10 s after it was due) has passed; the task is still QUEUED
    second = submit(engine, unique_key="k", unique_mode="while_active", unique_window_s=10)
    assert second.created and engine.tasks.get(first.id)["status"] == "QUEUED"


def test_while_active_default_cap_is_the_retention_after_the_task_is_due(engine: Engine, redis_client: redis.Redis
                                                                        ) -> None:
    first = submit(engine, unique_key="k", unique_mode="while_active", delay_seconds=100)
    key = engine.keys.unique(tag_of(first.id), "k")
    retention_ms = engine.config.task_retention_s * 1000
    holder, until = redis_client.get(key).split("|")
    assert holder == first.id and int(until) == engine.clock.now_ms() + 100_000 + retention_ms
    assert retention_ms + 100_000 - 5000 < redis_client.pttl(key) <= retention_ms + 100_000


# -- throttle ----------------------------------------------------------------------------------

def test_throttle_allows_one_task_per_window(engine: Engine) -> None:
    first = submit(engine, {"n": 1}, unique_key="ping", unique_mode="throttle", unique_window_s=30)
    drain(engine.config, queues=["uq"])  # finished: a throttle holds all the same
    engine.clock.advance(29.9)
    second = submit(engine, {"n": 2}, unique_key="ping", unique_mode="throttle", unique_window_s=30)
    assert second.id == first.id and not second.created and second.status == "SUCCEEDED"
    assert second.unique == {"existing": True, "mode": "throttle", "key": "ping"}
    engine.clock.advance(0.2)
    third = submit(engine, {"n": 3}, unique_key="ping", unique_mode="throttle", unique_window_s=30)
    assert third.created and third.id != first.id and engine.tasks.get(third.id)["payload"] == {"n": 3}


def test_throttles_window_counts_from_the_submit_not_the_delay(engine: Engine) -> None:
    first = submit(engine, unique_key="t", unique_mode="throttle", unique_window_s=5, delay_seconds=60)
    engine.clock.advance(5)
    second = submit(engine, unique_key="t", unique_mode="throttle", unique_window_s=5, delay_seconds=60)
    assert second.created and second.id != first.id


# -- debounce ----------------------------------------------------------------------------------

def test_debounce_replaces_the_payload_and_pushes_the_start_back(engine: Engine, redis_client: redis.Redis) -> None:
    first = submit(engine, {"v": 1}, unique_key="save", unique_mode="debounce", unique_window_s=10)
    tag = tag_of(first.id)
    assert first.status == "PENDING"
    assert redis_client.zscore(engine.keys.schedule(tag), first.id) == engine.clock.now_ms() + 10_000
    engine.clock.advance(8)
    second = submit(engine, {"v": 2}, unique_key="save", unique_mode="debounce", unique_window_s=10)
    assert second.id == first.id and not second.created and second.status == "PENDING"
    assert second.unique == {"existing": True, "mode": "debounce", "key": "save"}
    assert second.task is not None and second.task["payload"] == {"v": 2}  # the answer shows the new payload
    due = engine.clock.now_ms() + 10_000
    assert redis_client.zscore(engine.keys.schedule(tag), first.id) == due
    task = engine.tasks.get(first.id)
    assert task["payload"] == {"v": 2} and task["unique_mode"] == "debounce"
    assert redis_client.zcard(engine.keys.schedule(tag)) == 1
    assert redis_client.hget(engine.keys.schedule_counts(tag), "uq") == "1"  # counted once
    assert engine.queues.stats(["uq"])[0]["retry_scheduled"] == 1



def test_debounce_without_a_ttl_or_request_id_clears_the_waiting_tasks(engine: Engine,
                                                                       redis_client: redis.Redis) -> None:
    # A submit leaves out the fields it has no value for (a lean record): the debounced task still
    # takes this submit's expiry and request id, i.e. none.
    first = submit(engine, {"v": 1}, unique_key="exp", unique_mode="debounce", unique_window_s=10, ttl_seconds=60,
                   request_id="req-1")
    assert engine.tasks.get(first.id)["expires_at"] is not None
    assert engine.tasks.get(first.id)["request_id"] == "req-1"
    second = submit(engine, {"v": 2}, unique_key="exp", unique_mode="debounce", unique_window_s=10)
    assert second.id == first.id
    task = engine.tasks.get(first.id)
    assert task["payload"] == {"v": 2} and task["expires_at"] is None and task["request_id"] is None
    # Removed, not written empty: the record stays as lean as a fresh submit's.
    raw = redis_client.hgetall(engine.keys.task(first.id))
    assert "expires_at" not in raw and "request_id" not in raw and raw["payload"]
    third = submit(engine, {"v": 3}, unique_key="exp", unique_mode="debounce", unique_window_s=10, ttl_seconds=30,
                   request_id="req-3")
    task = engine.tasks.get(third.id)
    assert task["expires_at"] is not None and task["request_id"] == "req-3"


def test_debounce_adds_the_delay_to_the_window(engine: Engine, redis_client: redis.Redis) -> None:
    first = submit(engine, unique_key="d", unique_mode="debounce", unique_window_s=10, delay_seconds=50)
    assert redis_client.zscore(engine.keys.schedule(tag_of(first.id)), first.id) == engine.clock.now_ms() + 60_000


def test_debounce_starts_a_new_task_once_the_first_left_the_schedule(engine: Engine) -> None:
    first = submit(engine, {"v": 1}, unique_key="d", unique_mode="debounce", unique_window_s=0.05)
    # A burst worker's leader queues it once due, and runs it.
    wait_for(lambda: drain(engine.config, queues=["uq"]) or engine.tasks.get(first.id)["status"] == "SUCCEEDED")
    second = submit(engine, {"v": 2}, unique_key="d", unique_mode="debounce", unique_window_s=0.05)
    assert second.created and second.id != first.id
    assert engine.tasks.get(first.id)["result"] == {"v": 1}


def test_debounce_leaves_alone_a_task_that_ran_and_waits_again_after_rate_limited(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    # It should return the existing task only while it has not started: one whose handler ran and
    # raised RateLimited is back in the schedule (PENDING), but taking it over replaced what it
    # ran with and moved its start before the wait the downstream service asked for.
    live = Engine(config)  # the real clock: the worker's calls run on it
    first = submit(live, {"text": "v1"}, unique_key="doc:12", unique_mode="debounce", unique_window_s=0.05)
    time.sleep(0.1)
    promote(live, config, "uq", redis_client)
    (row,) = fetch(live, config, "uq", 1).rows  # the handler runs with v1 ...
    assert row.task_id == first.id
    due = int(time.time() * 1000) + 60_000  # ... and meets a 429 with Retry-After: 60
    assert complete(config, Completion(row, Outcome.LIMITED, error_class="dtq_tasks.RateLimited",
                                       error_message="429", retry_due_ms=due, limit_scope="group")) == ["PENDING"]
    second = submit(live, {"text": "v2"}, unique_key="doc:12", unique_mode="debounce", unique_window_s=0.05)
    assert second.created and second.id != first.id and second.status == "PENDING"
    held = live.tasks.get(first.id)
    assert held["payload"] == {"text": "v1"} and int(redis_client.hget(live.keys.task(first.id), "due_at")) == due
    # The new task holds the key from now on.
    assert submit(live, {"text": "v3"}, unique_key="doc:12", unique_mode="debounce", unique_window_s=0.05).id \
        == second.id


def test_debounce_takes_over_a_task_its_group_rate_held_back_before_it_started(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    live = Engine(config)
    live.limits.set("uq", {"group_rate": {"limit": 1, "period_s": 3600}}, actor=ACTOR)
    live.tasks.enqueue("dtq.echo", queue="uq", group_key="g")
    assert len(fetch(live, config, "uq", 1).rows) == 1  # the group's one start this hour
    first = submit(live, {"v": 1}, unique_key="d", unique_mode="debounce", unique_window_s=0.05, group_key="g")
    time.sleep(0.1)
    promote(live, config, "uq", redis_client)
    assert fetch(live, config, "uq", 1).rows == []  # held back: back in the schedule, never started
    assert live.tasks.get(first.id)["status"] == "PENDING"
    second = submit(live, {"v": 2}, unique_key="d", unique_mode="debounce", unique_window_s=0.05, group_key="g")
    assert second.id == first.id and not second.created
    assert live.tasks.get(first.id)["payload"] == {"v": 2}


def test_debounce_after_a_cancel_starts_a_new_task(engine: Engine) -> None:
    first = submit(engine, unique_key="d", unique_mode="debounce", unique_window_s=10)
    engine.tasks.cancel(first.id, ACTOR)
    second = submit(engine, unique_key="d", unique_mode="debounce", unique_window_s=10)
    assert second.created and second.status == "PENDING"


# -- with other options --------------------------------------------------------------------------

def test_an_idempotency_key_records_the_task_the_unique_key_answered_with(engine: Engine) -> None:
    first = submit(engine, unique_key="u", unique_mode="while_active", idempotency_key="req-1")
    second = submit(engine, unique_key="u", unique_mode="while_active", idempotency_key="req-2")
    assert second.id == first.id
    engine.tasks.cancel(first.id, ACTOR)
    # A retry of req-2 gets the answer req-2 got, though the key is free now.
    retry = submit(engine, unique_key="u", unique_mode="while_active", idempotency_key="req-2")
    assert retry.id == first.id and retry.unique["existing"] is True
    fresh = submit(engine, unique_key="u", unique_mode="while_active", idempotency_key="req-3")
    assert fresh.created and fresh.id != first.id


def test_unique_keys_of_two_queues_are_apart(engine: Engine) -> None:
    a = engine.tasks.enqueue("dtq.echo", queue="qa", unique_key="k", unique_mode="while_active")
    b = engine.tasks.enqueue("dtq.echo", queue="qb", unique_key="k", unique_mode="while_active")
    assert a.created and b.created


def test_a_unique_key_picks_one_partition_of_a_partitioned_queue(config: DtqConfig) -> None:
    engine = Engine(dataclasses.replace(config, queue_partitions=(("uq", 4),)),
                    clock=FakeClock(start_ms=int(time.time() * 1000)))
    assert len(engine.registry.ensure("uq").tags) == 4
    ids = {submit(engine, {"i": i}, unique_key="one", unique_mode="while_active").id for i in range(20)}
    assert len(ids) == 1
    plain = {tag_of(submit(engine).id) for _ in range(20)}
    assert len(plain) == 4  # other submits still spread


def test_a_batch_answers_each_item_and_sees_its_own_earlier_items(engine: Engine) -> None:
    subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="uq", unique_key="b", unique_mode="debounce",
                                  unique_window_s=10) for i in range(3)]
    out = engine.tasks.enqueue_many([*subs, engine.tasks.validate("dtq.echo", queue="uq")])
    assert [o.created for o in out] == [True, False, False, True]
    assert len({o.id for o in out[:3]}) == 1 and out[3].unique is None
    assert engine.tasks.get(out[0].id)["payload"] == {"i": 2}


def test_a_submit_without_unique_fields_has_none(engine: Engine, redis_client: redis.Redis) -> None:
    out = submit(engine)
    assert out.unique is None
    assert not any(k.startswith("unique") for k in redis_client.hkeys(engine.keys.task(out.id)))
    assert "unique_key" not in engine.tasks.get(out.id)
    assert not redis_client.keys(f"{engine.keys.prefix}:*unique*")


@pytest.mark.parametrize(("options", "field", "words"), [
    ({"unique_mode": "throttle", "unique_window_s": 5}, "unique_mode", "needs a unique_key"),
    ({"unique_window_s": 5}, "unique_window_s", "needs a unique_key"),
    ({"unique_key": "k"}, "unique_mode", "needs a unique_mode"),
    ({"unique_key": "k", "unique_mode": "once"}, "unique_mode", "one of while_active, throttle, debounce"),
    ({"unique_key": "k", "unique_mode": "throttle"}, "unique_window_s", "needs unique_window_s"),
    ({"unique_key": "k", "unique_mode": "debounce"}, "unique_window_s", "needs unique_window_s"),
    ({"unique_key": "k", "unique_mode": "throttle", "unique_window_s": 0}, "unique_window_s", "between"),
    ({"unique_key": "k", "unique_mode": "throttle", "unique_window_s": -1}, "unique_window_s", "between"),
    ({"unique_key": "k", "unique_mode": "throttle", "unique_window_s": True}, "unique_window_s", "a number"),
    ({"unique_key": "k", "unique_mode": "throttle", "unique_window_s": "5"}, "unique_window_s", "a number"),
    ({"unique_key": "", "unique_mode": "while_active"}, "unique_key", "1-200"),
    ({"unique_key": "x" * 201, "unique_mode": "while_active"}, "unique_key", "1-200"),
    ({"unique_key": 7, "unique_mode": "while_active"}, "unique_key", "1-200"),
    ({"unique_key": "\ud800", "unique_mode": "while_active"}, "unique_key", "1-200"),
    ({"unique_key": "k", "unique_mode": "debounce", "unique_window_s": 10, "ttl_seconds": 10}, "ttl_seconds",
     "debounced"),
])
def test_bad_unique_fields_are_refused_by_name(engine: Engine, options: dict[str, Any], field: str,
                                                words: str) -> None:
    with pytest.raises(ValidationError) as caught:
        submit(engine, **options)
    assert caught.value.field == field and words in caught.value.message
    assert only_task_ids(engine) == []


@pytest.mark.parametrize("key", ["é" * 200, "a|b", "|", "while_active|0|x", "{tag}:*"])
def test_any_key_of_up_to_200_characters_is_its_own(engine: Engine, key: str) -> None:
    first = submit(engine, unique_key=key, unique_mode="while_active")
    assert submit(engine, unique_key=key, unique_mode="while_active").id == first.id
    assert engine.tasks.get(first.id)["unique_key"] == key
    assert submit(engine, unique_key="!" + key[1:], unique_mode="while_active").created


# -- many submitters at once ---------------------------------------------------------------------

def _hammer(config: DtqConfig, threads: int, per_thread: int, **options: Any) -> list[Any]:
    engines = [Engine(config) for _ in range(threads)]
    results: list[list[Any]] = [[] for _ in range(threads)]
    start = threading.Barrier(threads)

    def run(i: int) -> None:
        start.wait()
        for n in range(per_thread):
            results[i].append(engines[i].tasks.enqueue("dtq.echo", {"t": i, "n": n}, queue="uq", record=False,
                                                       **options))

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    return [r for rs in results for r in rs]


@pytest.mark.parametrize("mode", ["while_active", "throttle"])
def test_many_threads_make_exactly_one_task(config: DtqConfig, engine: Engine, mode: str) -> None:
    window = {"unique_window_s": 60} if mode == "throttle" else {}
    out = _hammer(config, 16, 50, unique_key="hot", unique_mode=mode, **window)
    assert len(out) == 800 and len({o.id for o in out}) == 1
    assert sum(o.created for o in out) == 1 and only_task_ids(engine) == [out[0].id]


def test_many_threads_debouncing_leave_one_task_with_the_last_payload(config: DtqConfig, engine: Engine,
                                                                     redis_client: redis.Redis) -> None:
    out = _hammer(config, 16, 50, unique_key="hot", unique_mode="debounce", unique_window_s=60)
    assert len(out) == 800 and len({o.id for o in out}) == 1 and sum(o.created for o in out) == 1
    (task_id,) = only_task_ids(engine)
    assert engine.tasks.get(task_id)["payload"] in [{"t": t, "n": n} for t in range(16) for n in range(50)]
    last = engine.tasks.enqueue("dtq.echo", {"last": True}, queue="uq", unique_key="hot", unique_mode="debounce",
                                unique_window_s=60)
    assert last.id == task_id and engine.tasks.get(task_id)["payload"] == {"last": True}
    assert redis_client.zcard(engine.keys.schedule(tag_of(task_id))) == 1
