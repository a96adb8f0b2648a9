"""engine.limits (issue 22): validation, storage, audit, the settings form, and every way a task
leaves RUNNING giving back exactly what it held (queue slot, group slot), driven through the
worker's own store calls against a real Redis."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.limits import share
from dtq_core.errors import ValidationError
from dtq_core.keys import Keys
from dtq_core.task import Outcome
from dtq_core.worker.executor import Completion, Row
from dtq_core.worker.store import Fetched, WorkerStore

from ..worker.support import partitions, store

ACTOR = Actor(name="user:ops", source="api")
NONE = {"concurrency": None, "rate": None, "group_concurrency": None, "group_rate": None}


# -- validation and storage ----------------------------------------------------------------------
@pytest.mark.parametrize(("spec", "field"), [
    ({"concurrency": 0}, "concurrency"),
    ({"concurrency": 100_001}, "concurrency"),
    ({"concurrency": 1.5}, "concurrency"),
    ({"concurrency": True}, "concurrency"),
    ({"concurrency": "2"}, "concurrency"),
    ({"group_concurrency": -1}, "group_concurrency"),
    ({"rate": 5}, "rate"),
    ({"rate": {"limit": 0, "period_s": 1}}, "rate.limit"),
    ({"rate": {"limit": 1_000_001, "period_s": 1}}, "rate.limit"),
    ({"rate": {"limit": 5, "period_s": 0}}, "rate.period_s"),
    ({"rate": {"limit": 5, "period_s": 86_401}}, "rate.period_s"),
    ({"rate": {"limit": 5}}, "rate.period_s"),
    ({"rate": {"limit": 5, "period_s": 1, "burst": 2}}, "rate"),
    ({"group_rate": {"limit": 5, "period_s": float("nan")}}, "group_rate.period_s"),
    ({"concurrency": 10**400}, "concurrency"),  # float() of it overflows: still a ValidationError
    ({"rate": {"limit": 5, "period_s": 10**400}}, "rate.period_s"),
    ({"rate": {"limit": 5, "period_s": float("inf")}}, "rate.period_s"),
    ({"concurrency": 2, "priority": 1}, "priority"),
])
def test_bad_limits_are_refused_naming_the_field_and_change_nothing(
        engine: Engine, spec: dict[str, Any], field: str) -> None:
    engine.limits.set("q", {"concurrency": 3}, actor=ACTOR)
    with pytest.raises(ValidationError) as raised:
        engine.limits.set("q", spec, actor=ACTOR)
    assert raised.value.field == field
    assert engine.limits.get("q")["concurrency"] == 3


def test_limits_on_a_queue_that_never_saw_a_task_are_stored_shown_and_audited(engine: Engine) -> None:
    assert engine.limits.get("fresh") | {"usage": None} == {
        "queue": "fresh", **NONE, "source": None, "paused_until": None, "scope": "exact", "usage": None}
    spec = {"concurrency": 2, "rate": {"limit": 5, "period_s": 1}, "group_concurrency": 1,
            "group_rate": {"limit": 10, "period_s": 60}}
    view = engine.limits.set("fresh", spec, actor=ACTOR)
    assert view["concurrency"] == 2 and view["rate"] == {"limit": 5, "period_s": 1.0}
    assert view["group_concurrency"] == 1 and view["group_rate"] == {"limit": 10, "period_s": 60.0}
    assert view["source"] == "api" and view["scope"] == "exact"
    assert view["usage"] == {"running": 0, "rate_used": 0, "groups_running": 0, "throttled_total": 0}
    assert "fresh" in engine.queues.names()
    assert [v["queue"] for v in engine.limits.list()] == ["fresh"]
    # PUT semantics: what is left out is no limit.
    assert engine.limits.set("fresh", {"concurrency": 4}, actor=ACTOR) | {"usage": None} == {
        "queue": "fresh", **NONE, "concurrency": 4, "source": "api", "paused_until": None, "scope": "exact",
        "usage": None}
    cleared = engine.limits.clear("fresh", actor=ACTOR)
    assert {k: cleared[k] for k in NONE} == NONE and cleared["source"] is None
    assert engine.limits.list() == []
    tag = engine.registry.get("fresh").tags[0]
    assert not engine.client.exists(engine.keys.limits(tag))  # a queue without limits: no key at all
    trail = [e for e in engine.audit.list().items if e.get("action") == "queue.limits"]
    assert len(trail) >= 3 and all(e["target"] == "queue:fresh" for e in trail)


def test_a_partitioned_queue_splits_its_limits_so_the_total_is_never_exceeded(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    assert [share(10, 4, i) for i in range(4)] == [3, 3, 2, 2]
    assert [share(2, 4, i) for i in range(4)] == [1, 1, 1, 1]  # below one each: one each
    engine = Engine(dataclasses.replace(config, queue_partitions=(("wide", 4),)))
    view = engine.limits.set("wide", {"concurrency": 10, "rate": {"limit": 100, "period_s": 1},
                                      "group_concurrency": 1}, actor=ACTOR)
    assert view["scope"] == "per_partition" and view["concurrency"] == 10
    tags = engine.registry.get("wide").tags
    stored = [redis_client.hgetall(engine.keys.limits(t)) for t in tags]
    assert sum(int(s["conc"]) for s in stored) == 10 and sum(int(s["rate_n"]) for s in stored) == 100
    assert {s["gconc"] for s in stored} == {"1"}  # a group lives in one partition: exact
    # A group's tasks all go to the partition their group key picks.
    ids = [engine.tasks.enqueue("dtq.echo", queue="wide", group_key="acme").id for _ in range(8)]
    assert len({i.split("-")[0] for i in ids}) == 1


def test_the_settings_form_applies_only_what_changed_and_leaves_an_api_change_alone(engine: Engine) -> None:
    report = engine.limits.sync_declared({"emails": {"concurrency": 2}})
    assert report["applied"] == ["emails"]
    assert engine.limits.get("emails")["source"] == "settings"
    engine.limits.set("emails", {"concurrency": 5}, actor=ACTOR)  # an operator's change
    assert engine.limits.sync_declared({"emails": {"concurrency": 2}})["unchanged"] == ["emails"]
    assert engine.limits.get("emails")["concurrency"] == 5  # the same deploy again: kept
    assert engine.limits.sync_declared({"emails": {"concurrency": 3}})["applied"] == ["emails"]
    assert engine.limits.get("emails")["concurrency"] == 3  # a deploy that changes the value wins
    assert engine.limits.sync_declared({})["cleared"] == ["emails"]
    assert engine.limits.get("emails")["concurrency"] is None
    with pytest.raises(ValidationError):
        engine.limits.sync_declared({"emails": {"concurrency": 0}})


def test_group_key_is_validated_and_shown(engine: Engine) -> None:
    for bad in ("", "x" * 201, 5):
        with pytest.raises(ValidationError) as raised:
            engine.tasks.enqueue("dtq.echo", group_key=bad)
        assert raised.value.field == "group_key"
    tid = engine.tasks.enqueue("dtq.echo", group_key="tenant-7").id
    assert engine.tasks.get(tid)["group_key"] == "tenant-7"
    assert engine.tasks.get(engine.tasks.enqueue("dtq.echo").id)["group_key"] is None


# -- enforcement and release, through the worker's calls -----------------------------------------
def _run(coro_fn: Callable[[WorkerStore], Awaitable[Any]], config: DtqConfig, worker_id: str = "w-test") -> Any:
    async def go() -> Any:
        s = store(config, worker_id)
        try:
            return await coro_fn(s)
        finally:
            await s.aclose()
    return asyncio.run(go())


def _fetch(engine: Engine, config: DtqConfig, queue: str, n: int = 10) -> Fetched:
    return _run(lambda s: s.fetch([(p, n) for p in partitions(engine, queue)]), config)


def _complete(config: DtqConfig, *completions: Completion) -> list[Any]:
    return _run(lambda s: s.complete(list(completions)), config)


def _usage(engine: Engine, queue: str) -> dict[str, int]:
    return engine.limits.get(queue)["usage"]


def _held(engine: Engine, queue: str) -> dict[str, str]:
    tag = engine.registry.get(queue).tags[0]
    return engine.client.hgetall(engine.keys.limits_held(tag))


def _setup(engine: Engine, queue: str = "lim", **spec: Any) -> list[str]:
    engine.limits.set(queue, spec or {"concurrency": 1, "group_concurrency": 1}, actor=ACTOR)
    return [engine.tasks.enqueue("dtq.echo", queue=queue, group_key="g").id for _ in range(2)]


def test_a_full_queue_gives_nothing_clears_its_flag_and_a_completion_rings_it(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    ids = _setup(engine)
    first = _fetch(engine, config, "lim")
    assert [r.task_id for r in first.rows] == ids[:1]
    tag = engine.registry.get("lim").tags[0]
    second = _fetch(engine, config, "lim")
    assert second.rows == [] and second.drained == [tag] and second.waits == {}
    assert not redis_client.exists(engine.keys.ready(tag))  # no worker fetches it again for nothing
    assert engine.tasks.get(ids[1])["status"] == "QUEUED"
    assert _usage(engine, "lim")["running"] == 1 and _usage(engine, "lim")["throttled_total"] >= 1
    assert _complete(config, Completion(first.rows[0], Outcome.SUCCEEDED, result_json="null")) == ["SUCCEEDED"]
    assert redis_client.get(engine.keys.ready(tag)) == "1"  # rung: the slot is free
    assert [r.task_id for r in _fetch(engine, config, "lim").rows] == ids[1:]


@pytest.mark.parametrize("outcome", [Outcome.SUCCEEDED, Outcome.RETRY, Outcome.FAILED, Outcome.CANCELLED])
def test_every_completion_gives_the_slots_back_once(
        engine: Engine, config: DtqConfig, outcome: Outcome) -> None:
    ids = _setup(engine)
    (row,) = _fetch(engine, config, "lim").rows
    assert _usage(engine, "lim") | {"throttled_total": 0} == {
        "running": 1, "rate_used": 0, "groups_running": 1, "throttled_total": 0}
    due = int(time.time() * 1000) + 60_000 if outcome is Outcome.RETRY else 0
    done = Completion(row, outcome, result_json="null", error_class="E", error_message="m", retry_due_ms=due)
    _complete(config, done)
    assert _usage(engine, "lim")["running"] == 0 and _usage(engine, "lim")["groups_running"] == 0
    assert _held(engine, "lim") == {}
    (nxt,) = _fetch(engine, config, "lim").rows  # the group's next task takes the slot
    assert nxt.task_id == ids[1]
    # The same record sent again (its reply was lost) gives back nothing a second time.
    assert _complete(config, done)[0] in ("resent", "fenced")
    assert _usage(engine, "lim")["groups_running"] == 1 and list(_held(engine, "lim")) == [ids[1]]


def test_a_fenced_completion_gives_back_nothing(engine: Engine, config: DtqConfig) -> None:
    _setup(engine)
    (row,) = _fetch(engine, config, "lim").rows
    stale = dataclasses.replace(row, entry_id="0-1")
    assert _complete(config, Completion(stale, Outcome.SUCCEEDED, result_json="null")) == ["fenced"]
    assert _usage(engine, "lim")["running"] == 1 and _usage(engine, "lim")["groups_running"] == 1


def test_claims_given_back_at_a_drain_free_their_slots(engine: Engine, config: DtqConfig) -> None:
    ids = _setup(engine)
    rows = _fetch(engine, config, "lim").rows
    assert _run(lambda s: s.return_unstarted(rows), config) == 1
    assert engine.tasks.get(ids[0])["status"] == "QUEUED" and engine.tasks.get(ids[0])["attempt"] == 0
    assert _usage(engine, "lim")["running"] == 0 and _held(engine, "lim") == {}
    # Back at the tail of its stream: the group's other task goes first.
    assert [r.task_id for r in _fetch(engine, config, "lim").rows] == ids[1:]


def test_the_lost_task_sweep_frees_the_slots_of_a_task_whose_entry_vanished(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    ids = _setup(engine)
    (row,) = _fetch(engine, config, "lim").rows
    redis_client.xdel(row.stream, row.entry_id)  # the entry vanished while pending
    tag = engine.registry.get("lim").tags[0]
    redis_client.set(engine.keys.lock(tag), "leader")
    late = dataclasses.replace(config, visibility_timeout_s=0.001, heartbeat_interval_s=0.0005)
    time.sleep(0.01)
    assert _run(lambda s: s.recover_lost_tasks([tag]), late, "leader") == {tag: 1}
    assert engine.tasks.get(ids[0])["status"] == "QUEUED"
    assert _usage(engine, "lim")["running"] == 0 and _held(engine, "lim") == {}


def test_a_reclaim_keeps_the_slots_and_a_reclaim_out_of_attempts_frees_them(
        engine: Engine, config: DtqConfig) -> None:
    engine.limits.set("lim", {"concurrency": 1, "group_concurrency": 1}, actor=ACTOR)
    tid = engine.tasks.enqueue("dtq.echo", queue="lim", group_key="g", max_attempts=2).id
    fast = dataclasses.replace(config, visibility_timeout_s=0.05, heartbeat_interval_s=0.01)
    _fetch(engine, config, "lim")
    time.sleep(0.1)
    rows: list[Row] = _run(lambda s: s.reclaim(partitions(engine, "lim"), 10), fast, "peer")
    assert [(r.task_id, r.attempt) for r in rows] == [(tid, 2)]
    assert _usage(engine, "lim")["running"] == 1 and list(_held(engine, "lim")) == [tid]
    time.sleep(0.1)
    assert _run(lambda s: s.reclaim(partitions(engine, "lim"), 10), fast, "peer2") == []  # out of attempts
    assert engine.tasks.get(tid)["status"] == "DEAD_LETTERED"
    assert _usage(engine, "lim")["running"] == 0 and _held(engine, "lim") == {}


def test_a_full_group_parks_its_tasks_and_other_groups_go_on(engine: Engine, config: DtqConfig,
                                                             redis_client: redis.Redis) -> None:
    engine.limits.set("lim", {"group_concurrency": 1}, actor=ACTOR)
    a = [engine.tasks.enqueue("dtq.echo", queue="lim", group_key="a").id for _ in range(3)]
    b = engine.tasks.enqueue("dtq.echo", queue="lim", group_key="b").id
    rows = _fetch(engine, config, "lim").rows
    assert sorted(r.task_id for r in rows) == sorted([a[0], b])
    tag = engine.registry.get("lim").tags[0]
    assert redis_client.lrange(engine.keys.limits_wait(tag, "a"), 0, -1) == a[1:]
    assert [engine.tasks.get(t)["status"] for t in a[1:]] == ["QUEUED", "QUEUED"]
    assert [engine.tasks.get(t)["attempt"] for t in a[1:]] == [0, 0]
    first_a = next(r for r in rows if r.task_id == a[0])
    _complete(config, Completion(first_a, Outcome.SUCCEEDED, result_json="null"))
    assert [r.task_id for r in _fetch(engine, config, "lim").rows] == [a[1]]  # one back per freed slot
    # Raising the limit lets every parked task go at once.
    engine.limits.set("lim", {"group_concurrency": 5}, actor=ACTOR)
    assert [r.task_id for r in _fetch(engine, config, "lim").rows] == [a[2]]
    assert not redis_client.exists(engine.keys.limits_wait(tag, "a"))


def test_a_purge_cancels_the_tasks_parked_by_a_full_group(engine: Engine, config: DtqConfig,
                                                            redis_client: redis.Redis) -> None:
    engine.limits.set("lim", {"group_concurrency": 1}, actor=ACTOR)
    a = [engine.tasks.enqueue("dtq.echo", queue="lim", group_key="a").id for _ in range(3)]
    [running] = _fetch(engine, config, "lim").rows
    later = engine.tasks.enqueue("dtq.echo", queue="lim", group_key="b").id  # in the stream
    assert engine.queues.purge("lim", ACTOR) == 3  # two parked, one in the stream
    assert [engine.tasks.get(t)["status"] for t in a[1:] + [later]] == ["CANCELLED"] * 3
    tag = engine.registry.get("lim").tags[0]
    assert not redis_client.exists(engine.keys.limits_wait(tag, "a"))
    # The running one is left alone; its slot, once given back, lets nothing parked run.
    _complete(config, Completion(running, Outcome.SUCCEEDED, result_json="null"))
    assert engine.tasks.get(a[0])["status"] == "SUCCEEDED"
    assert _fetch(engine, config, "lim").rows == []


def test_a_rate_limit_replies_how_long_to_wait(engine: Engine, config: DtqConfig) -> None:
    engine.limits.set("lim", {"rate": {"limit": 2, "period_s": 5}}, actor=ACTOR)
    for _ in range(3):
        engine.tasks.enqueue("dtq.echo", queue="lim")
    assert len(_fetch(engine, config, "lim").rows) == 2
    held = _fetch(engine, config, "lim")
    tag = engine.registry.get("lim").tags[0]
    assert held.rows == [] and held.drained == [tag] and 4.0 < held.waits[tag] <= 5.0
    assert _usage(engine, "lim")["rate_used"] == 2


def test_a_group_out_of_tokens_waits_in_the_schedule_not_counted_as_an_attempt(
        engine: Engine, config: DtqConfig) -> None:
    engine.limits.set("lim", {"group_rate": {"limit": 1, "period_s": 30}}, actor=ACTOR)
    first, second = (engine.tasks.enqueue("dtq.echo", queue="lim", group_key="g").id for _ in range(2))
    other = engine.tasks.enqueue("dtq.echo", queue="lim", group_key="h").id
    assert sorted(r.task_id for r in _fetch(engine, config, "lim").rows) == sorted([first, other])
    task = engine.tasks.get(second)
    assert task["status"] == "PENDING" and task["attempt"] == 0 and task["due_at"] is not None


def test_rate_limited_puts_the_task_back_uncounted_and_pauses_the_queue(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    tid = engine.tasks.enqueue("dtq.echo", queue="lim", max_attempts=1).id
    engine.tasks.enqueue("dtq.echo", queue="lim")
    (row,) = _fetch(engine, config, "lim", 1).rows
    due = int(time.time() * 1000) + 3000
    done = Completion(row, Outcome.LIMITED, error_class="dtq_tasks.RateLimited", error_message="429",
                      retry_due_ms=due, limit_scope="queue")
    assert _complete(config, done) == ["PENDING"]
    task = engine.tasks.get(tid)
    assert task["status"] == "PENDING" and task["attempt"] == 0 and task["errors"] == []
    assert task["last_error"] == "dtq_tasks.RateLimited: 429"
    assert engine.queues.get("lim")["dlq"] == 0 and engine.queues.get("lim")["retry_scheduled"] == 1
    held = _fetch(engine, config, "lim")
    tag = engine.registry.get("lim").tags[0]
    assert held.rows == [] and 2.0 < held.waits[tag] <= 3.0
    assert engine.limits.get("lim")["paused_until"] is not None
    # Not an attempt's outcome: nothing counted in dtq_tasks_total.
    assert not any(f.endswith("|pending") for f in redis_client.hkeys(engine.keys.stats_tasks(tag)))
    stream = engine.keys.stream(tag, "lim", "normal")
    assert redis_client.xpending(stream, Keys.GROUP)["pending"] == 0  # its entry was settled


def test_a_partitioned_queue_never_runs_more_than_its_concurrency_in_total(
        config: DtqConfig) -> None:
    wide = dataclasses.replace(config, queue_partitions=(("wide", 2),))
    engine = Engine(wide)
    engine.limits.set("wide", {"concurrency": 3}, actor=ACTOR)
    for _ in range(12):
        engine.tasks.enqueue("dtq.echo", queue="wide")
    fetched = _fetch(engine, wide, "wide")
    assert len(fetched.rows) == 3  # shares 2 + 1
    assert engine.limits.get("wide")["usage"]["running"] == 3
    assert _fetch(engine, wide, "wide").rows == []


def test_dtq_queue_limits_is_read_from_settings_and_synced_by_a_starting_worker(
        config: DtqConfig, engine: Engine, settings: Any) -> None:
    from dtq_core.conf import declared_queue_limits
    from dtq_core.config import ConfigError
    from dtq_core.worker.runtime import Worker

    settings.DTQ_QUEUE_LIMITS = {"emails": {"concurrency": 2, "rate": {"limit": 5, "period_s": 1}}}
    declared = declared_queue_limits()
    assert declared == {"emails": {"concurrency": 2, "rate": {"limit": 5, "period_s": 1.0},
                                   "group_concurrency": None, "group_rate": None}}
    worker = Worker(config, queues=["emails"], queue_limits=declared)
    asyncio.run(worker._sync_limits(declared))
    view = engine.limits.get("emails")
    assert view["concurrency"] == 2 and view["source"] == "settings"
    for bad, match in (({"emails": {"concurrency": 0}}, r"DTQ_QUEUE_LIMITS\['emails'\]: concurrency"),
                       ({"Bad Name": {}}, "not a queue name"), ([], "must be a dict")):
        settings.DTQ_QUEUE_LIMITS = bad
        with pytest.raises(ConfigError, match=match):
            declared_queue_limits()
    del settings.DTQ_QUEUE_LIMITS
    assert declared_queue_limits() is None
