"""engine.limits (issue 22): validation, storage, audit, the settings form, and every way a task
leaves RUNNING giving back exactly what it held (queue slot, group slot), driven through the
worker's own store calls against a real Redis."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from typing import Any

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq_selection import DlqSelection
from dtq_core.engine.limits import share
from dtq_core.errors import QueueFull, ValidationError
from dtq_core.keys import Keys
from dtq_core.task import Outcome
from dtq_core.worker.executor import Completion, Row
from dtq_core.worker.store import Fetched

from ..worker.support import partitions
from .support import complete, fetch, promote, run

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
def _fetch(engine: Engine, config: DtqConfig, queue: str, n: int = 10) -> Fetched:
    return run(lambda s: s.fetch([(p, n) for p in partitions(engine, queue)]), config)


def _complete(config: DtqConfig, *completions: Completion) -> list[Any]:
    return run(lambda s: s.complete(list(completions)), config)


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
    assert run(lambda s: s.return_unstarted(rows), config) == 1
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
    assert run(lambda s: s.recover_lost_tasks([tag]), late, "leader") == {tag: 1}
    assert engine.tasks.get(ids[0])["status"] == "QUEUED"
    assert _usage(engine, "lim")["running"] == 0 and _held(engine, "lim") == {}


def test_a_reclaim_keeps_the_slots_and_a_reclaim_out_of_attempts_frees_them(
        engine: Engine, config: DtqConfig) -> None:
    engine.limits.set("lim", {"concurrency": 1, "group_concurrency": 1}, actor=ACTOR)
    tid = engine.tasks.enqueue("dtq.echo", queue="lim", group_key="g", max_attempts=2).id
    fast = dataclasses.replace(config, visibility_timeout_s=0.05, heartbeat_interval_s=0.01)
    _fetch(engine, config, "lim")
    time.sleep(0.1)
    rows: list[Row] = run(lambda s: s.reclaim(partitions(engine, "lim"), 10), fast, "peer")
    assert [(r.task_id, r.attempt) for r in rows] == [(tid, 2)]
    assert _usage(engine, "lim")["running"] == 1 and list(_held(engine, "lim")) == [tid]
    time.sleep(0.1)
    assert run(lambda s: s.reclaim(partitions(engine, "lim"), 10), fast, "peer2") == []  # out of attempts
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


# -- the rate windows: a sliding log of every start ------------------------------------------------
def _window(live: Engine, queue: str, limit: str, group: str | None) -> int:
    """Starts in the queue's window (rate) or the group's (group_rate)."""
    if limit == "rate":
        return int(live.limits.get(queue)["usage"]["rate_used"])
    tag = live.registry.get(queue).tags[0]
    return int(live.client.zcard(live.keys.limits_group_rate(tag, str(group))))


def _end_so_it_runs_again_at_the_same_attempt(how: str, live: Engine, config: DtqConfig,
                                              redis_client: redis.Redis, row: Row) -> None:
    if how.startswith("rate_limited"):
        # The handler met a 429: RateLimited(retry_after=~0) is not an attempt; it runs again at
        # the same attempt number once promoted.
        due = int(time.time() * 1000) + 1
        assert complete(config, Completion(row, Outcome.LIMITED, error_class="dtq_tasks.RateLimited",
                                           error_message="429", retry_due_ms=due,
                                           limit_scope=how.split(":")[1])) == ["PENDING"]
        time.sleep(0.005)  # past its 1 ms wait (and the pause it asked for)
        promote(live, config, "rl", redis_client)
    else:  # dead-lettered, then retried from the DLQ by an operator: attempt 1 again
        assert complete(config, Completion(row, Outcome.FAILED, error_class="E", error_message="boom")) \
            == ["DEAD_LETTERED"]
        assert live.dlq.retry(DlqSelection(task_ids=(row.task_id,)), ACTOR) == 1


@pytest.mark.parametrize("limit", ["rate", "group_rate"])
@pytest.mark.parametrize("how", ["rate_limited:group", "rate_limited:queue", "dlq_retry"])
def test_a_task_started_again_at_the_same_attempt_counts_as_a_second_start(
        limit: str, how: str, config: DtqConfig, redis_client: redis.Redis) -> None:
    # It should count every start in the window ("at most n starts in any window of s seconds"),
    # also one at an attempt number the window saw already (the members were "<task id>:<attempt>",
    # and the second start only moved the first).
    live = Engine(config)  # the real clock: the window is the worker's time
    live.limits.set("rl", {limit: {"limit": 2, "period_s": 60}}, actor=ACTOR)
    group = "tenant" if limit == "group_rate" else None
    a = live.tasks.enqueue("dtq.echo", queue="rl", max_attempts=1, group_key=group).id
    for start in (1, 2):
        (row,) = fetch(live, config, "rl", 1).rows
        assert (row.task_id, row.attempt) == (a, 1)
        assert _window(live, "rl", limit, group) == start
        _end_so_it_runs_again_at_the_same_attempt(how, live, config, redis_client, row)
    b = live.tasks.enqueue("dtq.echo", queue="rl", group_key=group).id
    held = fetch(live, config, "rl", 10)
    assert held.rows == []  # two starts within the minute: nothing more
    if limit == "rate":  # until the first start leaves the window (not a handler's pause)
        assert min(held.waits.values()) > 50
    assert _window(live, "rl", limit, group) == 2
    if limit == "group_rate":  # held back in the schedule, attempt untouched
        assert {live.tasks.get(t)["status"] for t in (a, b)} == {"PENDING"}
        assert live.tasks.get(a)["attempt"] == 0


@pytest.mark.parametrize("limit", ["rate", "group_rate"])
def test_a_claim_handed_back_unstarted_takes_its_start_out_of_the_window(
        limit: str, config: DtqConfig) -> None:
    live = Engine(config)
    live.limits.set("rl", {limit: {"limit": 2, "period_s": 60}}, actor=ACTOR)
    group = "tenant" if limit == "group_rate" else None
    ids = [live.tasks.enqueue("dtq.echo", queue="rl", group_key=group).id for _ in range(3)]
    (row,) = fetch(live, config, "rl", 1).rows
    assert _window(live, "rl", limit, group) == 1
    assert run(lambda s: s.return_unstarted([row]), config) == 1  # a drain: it never started
    assert _window(live, "rl", limit, group) == 0
    # Two starts are left in the window: the other two tasks (the one handed back is at the tail).
    assert [r.task_id for r in fetch(live, config, "rl", 10).rows] == ids[1:]
    assert fetch(live, config, "rl", 10).rows == [] and _window(live, "rl", limit, group) == 2


def test_a_reclaimed_attempt_runs_again_without_counting_in_the_rate_window(
        config: DtqConfig) -> None:
    # The stated exception (docs/tasks.md, "Flow control"): a crashed worker's attempt, reclaimed
    # after the visibility timeout, runs again without being judged by the limits or counted as a
    # start, as any at-least-once re-run; the window keeps the first start only.
    live = Engine(config)
    live.limits.set("rl", {"rate": {"limit": 1, "period_s": 60}}, actor=ACTOR)
    a = live.tasks.enqueue("dtq.echo", queue="rl", max_attempts=5).id
    b = live.tasks.enqueue("dtq.echo", queue="rl").id
    fast = dataclasses.replace(config, visibility_timeout_s=0.05, heartbeat_interval_s=0.01)
    (row,) = fetch(live, config, "rl", 1, worker_id="dead-worker").rows  # its worker then dies
    starts = [(row.task_id, row.attempt)]
    for peer in ("peer1", "peer2"):
        time.sleep(0.1)  # past the visibility timeout
        rows = run(lambda s: s.reclaim(partitions(live, "rl"), 10), fast, peer)
        starts += [(r.task_id, r.attempt) for r in rows]
    assert starts == [(a, 1), (a, 2), (a, 3)]
    assert live.limits.get("rl")["usage"]["rate_used"] == 1
    # A reclaimed claim handed back unstarted leaves the first start in the window.
    assert run(lambda s: s.return_unstarted(rows), fast, "peer2") == 1
    assert live.limits.get("rl")["usage"]["rate_used"] == 1
    assert fetch(live, config, "rl", 10).rows == [] and live.tasks.get(b)["status"] == "QUEUED"


# -- the depth gate: parked tasks are waiting ------------------------------------------------------
def _flood(live: Engine, config: DtqConfig) -> tuple[list[str], list[Row]]:
    """20 rounds of 10 submits of one group, a worker fetching in between: the ids accepted, and
    the rows the worker started."""
    ids, rows = [], []
    for _ in range(20):
        for _ in range(10):
            with contextlib.suppress(QueueFull):
                ids.append(live.tasks.enqueue("dtq.echo", queue="tenants", group_key="hot").id)
        rows += fetch(live, config, "tenants", 50).rows
    return ids, rows


def _waiting(live: Engine) -> tuple[int, int]:
    shown = live.queues.get("tenants")
    return shown["waiting"], shown["pending"]


def test_tasks_parked_by_a_full_group_count_toward_the_depth_gate_and_as_waiting(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    # It should refuse once the queue holds DTQ_MAX_QUEUE_DEPTH tasks waiting or in flight: a task
    # parked by its full group is waiting (the gate counted stream entries, and a parked task had
    # left its stream: one tenant's flood grew the queue without bound, showing 0 waiting).
    capped = dataclasses.replace(config, max_queue_depth=10)
    live = Engine(capped)
    live.limits.set("tenants", {"group_concurrency": 1}, actor=ACTOR)
    ids, rows = _flood(live, capped)
    assert len(ids) == 10 and [r.task_id for r in rows] == ids[:1]
    assert _waiting(live) == (9, 1)
    assert {live.tasks.get(t)["status"] for t in ids[1:]} == {"QUEUED"}
    stream = live.keys.stream(live.registry.get("tenants").tags[0], "tenants", "normal")
    # Kept exact on every way out of the wait list. A cancel frees a place at the gate ...
    live.tasks.cancel(ids[1], ACTOR)
    assert _waiting(live) == (8, 1)
    extra = live.tasks.enqueue("dtq.echo", queue="tenants", group_key="hot").id
    with pytest.raises(QueueFull):
        live.tasks.enqueue("dtq.echo", queue="tenants", group_key="hot")
    assert fetch(live, capped, "tenants", 50).rows == []  # the group is still full: parked too
    assert _waiting(live) == (9, 1)
    # ... a freed group slot puts the next parked task back in its stream, counted once ...
    assert complete(capped, Completion(rows[0], Outcome.SUCCEEDED, result_json="null")) == ["SUCCEEDED"]
    assert redis_client.xlen(stream) == 9 and _waiting(live) == (9, 0)
    (nxt,) = fetch(live, capped, "tenants", 50).rows
    assert nxt.task_id == ids[2] and _waiting(live) == (8, 1)
    # ... a purge cancels the parked ones and deletes the entries they kept ...
    assert live.queues.purge("tenants", ACTOR) == 8
    assert live.tasks.get(extra)["status"] == "CANCELLED"
    assert redis_client.xlen(stream) == 1 and _waiting(live) == (0, 1)
    complete(capped, Completion(nxt, Outcome.SUCCEEDED, result_json="null"))
    assert redis_client.xlen(stream) == 0
    # ... and the queue, empty, can be deleted.
    live.queues.delete("tenants", ACTOR)
    assert "tenants" not in live.queues.names()


@pytest.mark.parametrize("how", ["an older worker put it back", "an older purge dropped it from its list",
                                 "its record expired"])
def test_a_purge_deletes_a_kept_entry_left_behind(how: str, config: DtqConfig, redis_client: redis.Redis) -> None:
    live = Engine(config)
    live.limits.set("tenants", {"group_concurrency": 1}, actor=ACTOR)
    first, parked = (live.tasks.enqueue("dtq.echo", queue="tenants", group_key="hot").id for _ in range(2))
    (row,) = fetch(live, config, "tenants", 50).rows
    tag = live.registry.get("tenants").tags[0]
    stream, wait = live.keys.stream(tag, "tenants", "normal"), live.keys.limits_wait(tag, "hot")
    kept = redis_client.hget(live.keys.task(parked), "entry_id")
    if how == "an older worker put it back":
        # What the version before kept entries did when a group slot freed, during a rolling deploy:
        # a new entry for the task, its kept one left in the stream.
        assert redis_client.lpop(wait) == parked
        eid = redis_client.xadd(stream, {"task_id": parked, "attempt": 1})
        redis_client.hset(live.keys.task(parked), "entry_id", eid)
    elif how == "an older purge dropped it from its list":  # it skipped a parked task with an entry
        assert redis_client.lpop(wait) == parked
    else:
        redis_client.delete(live.keys.task(parked))
    complete(config, Completion(row, Outcome.SUCCEEDED, result_json="null"))
    assert kept in [e for e, _ in redis_client.xrange(stream)]
    assert live.queues.purge("tenants", ACTOR) == (0 if how == "its record expired" else 1)
    if how != "its record expired":
        assert live.tasks.get(parked)["status"] == "CANCELLED"
    assert redis_client.xlen(stream) == 0 and _waiting(live) == (0, 0)
    live.queues.delete("tenants", ACTOR)
    assert first


def test_a_change_of_limits_puts_parked_tasks_back_counted_once(config: DtqConfig, redis_client: redis.Redis) -> None:
    live = Engine(config)
    live.limits.set("tenants", {"group_concurrency": 1}, actor=ACTOR)
    ids = [live.tasks.enqueue("dtq.echo", queue="tenants", group_key="hot").id for _ in range(4)]
    assert [r.task_id for r in fetch(live, config, "tenants", 50).rows] == ids[:1]
    stream = live.keys.stream(live.registry.get("tenants").tags[0], "tenants", "normal")
    assert redis_client.xlen(stream) == 4 and _waiting(live) == (3, 1)
    live.limits.set("tenants", {}, actor=ACTOR)  # no group limit: every parked task goes back
    assert redis_client.xlen(stream) == 4 and _waiting(live) == (3, 1)
    assert [r.task_id for r in fetch(live, config, "tenants", 50).rows] == ids[1:]
    assert _waiting(live) == (0, 4)


def test_tasks_deferred_by_group_rate_wait_in_the_schedule_past_the_depth_gate(config: DtqConfig) -> None:
    # The stated exception (docs/tasks.md, "Enqueueing"): a task its group's rate holds back waits
    # in the schedule, as a delayed task does, and the depth gate does not count it; the queue
    # shows it under retry_scheduled.
    capped = dataclasses.replace(config, max_queue_depth=10)
    live = Engine(capped)
    live.limits.set("tenants", {"group_rate": {"limit": 1, "period_s": 3600}}, actor=ACTOR)
    ids, rows = _flood(live, capped)
    assert len(rows) == 1 and len(ids) > 10
    shown = live.queues.get("tenants")
    assert (shown["waiting"], shown["pending"], shown["retry_scheduled"]) == (0, 1, len(ids) - 1)
