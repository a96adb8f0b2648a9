"""engine.periodic against a real Redis, on a FakeClock: the stored schedules, their audited
changes (two operators' at once: a compare-and-set on the schedule's revision), and
firePeriodic-1 as the leader calls it (fenced by the partition's lease, a compare-and-set on the
schedule's next tick), without worker processes (tests/failure/test_periodic.py has those).
Quick: also run on Cluster and Sentinel (Makefile TOPOLOGY_TESTS)."""

from __future__ import annotations

import dataclasses
import json
from datetime import datetime
from typing import Any

import pytest

from dtq_core.clock import SystemClock, iso
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec
from dtq_core.errors import (
    ErrorCode,
    PartitionClosed,
    PeriodicConflict,
    PeriodicDeclaredInCode,
    PeriodicExists,
    PeriodicNotFound,
    QueueLimitReached,
    QueueNotEmpty,
    UnknownTaskType,
    ValidationError,
)
from dtq_core.firing import plan
from dtq_core.worker.periodic import grace_ms

from .support import at_once, leader_round, twin

ACTOR = Actor.user("ops", source="api", request_id="r1")
LEADER = "leader-1"


class AheadClock(SystemClock):
    """The system clock of a host two minutes ahead of Redis's."""

    def now_ms(self) -> int:
        return super().now_ms() + 120_000


def redis_ms(engine: Engine) -> int:
    seconds, micros = engine.client.time()
    return int(seconds) * 1000 + int(micros) // 1000


def ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)


def every(name: str = "beat", seconds: float = 10, **kw: Any) -> PeriodicSpec:
    return PeriodicSpec(name=name, type="dtq.echo", payload={"n": 1}, every_seconds=seconds, **kw)


def tag_of_schedule(engine: Engine, name: str) -> str:
    return engine.periodic.names()[name]


def lead(engine: Engine, tag: str, worker: str = LEADER) -> None:
    """Hold the partition's lease as the leader would (renewLock)."""
    engine.client.set(engine.keys.lock(tag), worker, px=60_000)


def fire(engine: Engine, name: str, worker: str = LEADER) -> Any:
    """One leader fire of a schedule, computed as dtq_core/worker/periodic.py does."""
    tag = tag_of_schedule(engine, name)
    h = engine.client.hgetall(engine.keys.periodic(tag, name))
    stored = engine.periodic.get(name)
    spec = PeriodicSpec.from_dict({k: stored[k] for k in ("name", "type", "payload", "queue", "priority", "cron",
                                                          "timezone", "every_seconds", "overlap", "misfire")})
    now = engine.clock.now_ms()
    p = plan(spec.ticks, int(h["next"]), now, grace_ms(engine.config), spec.misfire)
    if p is None:
        return None
    layout = engine.registry.get(spec.queue, fresh=True)
    args = engine.periodic.fire_args(tag, layout, name, worker, p, spec.misfire, now, rev=h["rev"])
    return engine.scripts("firePeriodic", keys=[engine.keys.partition(tag)], args=args)


def fired(engine: Engine, name: str) -> list[dict[str, Any]]:
    return engine.tasks.list(periodic_name=name, limit=500).items


def test_create_get_list_and_the_representation(engine: Engine) -> None:
    view = engine.periodic.create(PeriodicSpec(name="report.nightly", type="dtq.echo", cron="0 3 * * *",
                                               timezone="Europe/Berlin", queue="reports", priority="high"),
                                  actor=ACTOR)
    assert view["name"] == "report.nightly" and view["queue"] == "reports" and view["priority"] == "high"
    assert view["paused"] is False and view["source"] == "api" and view["last_runs"] == []
    assert view["description"] == "At 03:00 (Europe/Berlin)"
    next_ms = engine.periodic.create(every("a.first", 60), actor=ACTOR)["next_run_at"]
    assert next_ms == iso((engine.clock.now_ms() // 60_000 + 1) * 60_000)
    assert [s["name"] for s in engine.periodic.list()] == ["a.first", "report.nightly"]
    with pytest.raises(PeriodicExists):
        engine.periodic.create(every("report.nightly"), actor=ACTOR)
    with pytest.raises(PeriodicNotFound):
        engine.periodic.get("nope")
    # It lives in the first partition of its queue.
    assert tag_of_schedule(engine, "report.nightly") == engine.registry.get("reports", fresh=True).tags[0]
    actions = [row["action"] for row in engine.audit.list().items]
    assert actions[:2] == ["periodic.create", "periodic.create"]


@pytest.mark.parametrize(("body", "field"), [
    ({"name": "x", "type": "dtq.echo", "cron": "61 * * * *"}, "cron"),
    ({"name": "x", "type": "dtq.echo", "cron": "* * *"}, "cron"),
    ({"name": "x", "type": "dtq.echo"}, "cron"),
    ({"name": "x", "type": "dtq.echo", "cron": "0 3 * * *", "every_seconds": 5}, "cron"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 0.5}, "every_seconds"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": True}, "every_seconds"),
    ({"name": "x", "type": "dtq.echo", "cron": "0 3 * * *", "timezone": "Mars/Olympus"}, "timezone"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 5, "timezone": "Europe/Berlin"}, "timezone"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 5, "overlap": "never"}, "overlap"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 5, "misfire": "all"}, "misfire"),
    ({"name": "bad name", "type": "dtq.echo", "every_seconds": 5}, "name"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 5, "queue": "Bad"}, "queue"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 5, "priority": "urgent"}, "priority"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 5, "payload": {"f": float("nan")}}, "payload"),
    ({"name": "x", "type": "dtq.echo", "every_seconds": 5, "colour": "red"}, "colour"),
    ({"type": "dtq.echo", "every_seconds": 5}, "name"),
])
def test_validation_names_the_field(engine: Engine, body: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        engine.periodic.create(PeriodicSpec.from_dict(body), actor=ACTOR)
    assert caught.value.field == field
    assert engine.periodic.list() == []


def test_an_unserved_type_is_refused_like_a_submit(engine: Engine) -> None:
    engine.client.hset(engine.keys.task_types(), "dtq.echo", 1)
    with pytest.raises(UnknownTaskType):
        engine.periodic.create(PeriodicSpec(name="x", type="no.such", every_seconds=5), actor=ACTOR)


def test_a_tick_fires_once_with_its_fields_and_advances(engine: Engine) -> None:
    engine.periodic.create(every("beat", 10), actor=ACTOR)
    tag = tag_of_schedule(engine, "beat")
    lead(engine, tag)
    first = engine.clock.now_ms() // 10_000 * 10_000 + 10_000
    engine.clock.advance((first - engine.clock.now_ms()) / 1000 + 0.2)
    code, created, applied = fire(engine, "beat")
    assert (code, len(created), applied) == (ErrorCode.OK, 1, 1)
    task = engine.tasks.get(str(created[0]))
    assert task["periodic_name"] == "beat" and task["scheduled_for"] == iso(first)
    assert task["payload"] == {"n": 1} and task["status"] == "QUEUED" and task["queue"] == "default"
    view = engine.periodic.get("beat")
    assert view["next_run_at"] == iso(first + 10_000)
    assert view["last_runs"][0] == {"scheduled_for": iso(first), "task_id": created[0], "status": "QUEUED",
                                    "fired_at": iso(engine.clock.now_ms()), "kind": "tick", "missed": 0}
    # The same computation again (a stalled leader waking up): the compare-and-set refuses it.
    h = engine.client.hgetall(engine.keys.periodic(tag, "beat"))
    p = plan(every().ticks, first, engine.clock.now_ms(), grace_ms(engine.config), "skip")
    assert p is not None
    args = engine.periodic.fire_args(tag, None, "beat", LEADER, p, "skip", engine.clock.now_ms(), rev=h["rev"])
    assert engine.scripts("firePeriodic", keys=[engine.keys.partition(tag)], args=args) == [ErrorCode.OK, [], 0]
    # Even past the compare-and-set (the tick's marker): never a second task for the tick.
    engine.client.hset(engine.keys.periodic(tag, "beat"), "next", first)
    assert engine.scripts("firePeriodic", keys=[engine.keys.partition(tag)], args=args)[1] == []
    assert engine.client.get(engine.keys.periodic_tick(tag, "beat", first)) == created[0]
    assert [t["id"] for t in fired(engine, "beat")] == [created[0]]


def test_a_leader_without_the_lease_fires_nothing(engine: Engine) -> None:
    engine.periodic.create(every("beat", 10), actor=ACTOR)
    tag = tag_of_schedule(engine, "beat")
    lead(engine, tag, "someone-else")
    engine.clock.advance(11)
    assert fire(engine, "beat") == ErrorCode.LEASE_LOST
    assert fired(engine, "beat") == []


def test_a_change_between_read_and_fire_makes_the_fire_stale(engine: Engine) -> None:
    engine.periodic.create(every("beat", 10), actor=ACTOR)
    tag = tag_of_schedule(engine, "beat")
    lead(engine, tag)
    engine.clock.advance(11)
    h = engine.client.hgetall(engine.keys.periodic(tag, "beat"))
    p = plan(every().ticks, int(h["next"]), engine.clock.now_ms(), grace_ms(engine.config), "skip")
    engine.periodic.update("beat", {"payload": {"n": 2}}, actor=ACTOR)  # same ticks, new revision
    args = engine.periodic.fire_args(tag, None, "beat", LEADER, p, "skip", engine.clock.now_ms(), rev=h["rev"])
    assert engine.scripts("firePeriodic", keys=[engine.keys.partition(tag)], args=args)[2] == 0
    _, created, _ = fire(engine, "beat")  # computed afresh: fires, with the new payload
    assert engine.tasks.get(created[0])["payload"] == {"n": 2}


def test_overlap_skip_records_the_tick_while_the_last_run_is_unfinished(engine: Engine) -> None:
    # On a whole second, so that 1.1 s later exactly one tick is due (the fixture's clock starts
    # at the real time: at .950 two ticks would be due, and the second skipped in the first fire).
    engine.clock.advance((1000 - engine.clock.now_ms() % 1000) / 1000)
    engine.periodic.create(every("slow", 1, overlap="skip"), actor=ACTOR)
    lead(engine, tag_of_schedule(engine, "slow"))
    engine.clock.advance(1.1)
    _, first, _ = fire(engine, "slow")
    engine.clock.advance(1)
    _, second, _ = fire(engine, "slow")
    assert len(first) == 1 and second == []
    runs = engine.periodic.get("slow")["last_runs"]
    assert [r["status"] for r in runs] == ["SKIPPED", "QUEUED"] and runs[0]["task_id"] is None
    engine.tasks.cancel(first[0], ACTOR)  # finished: the next tick fires again
    engine.clock.advance(1)
    assert len(fire(engine, "slow")[1]) == 1


def test_overlap_allow_fires_every_tick(engine: Engine) -> None:
    engine.periodic.create(every("fast", 1), actor=ACTOR)
    lead(engine, tag_of_schedule(engine, "fast"))
    for _ in range(3):
        engine.clock.advance(1)
        fire(engine, "fast")
    assert len(fired(engine, "fast")) == 3


@pytest.mark.parametrize(("misfire", "tasks", "kinds"), [
    ("skip", 1, ["tick", "missed"]),
    ("run_once", 2, ["tick", "catch_up"]),
])
def test_missed_ticks_follow_misfire(engine: Engine, misfire: str, tasks: int, kinds: list[str]) -> None:
    engine.periodic.create(every("m", 1, misfire=misfire), actor=ACTOR)
    lead(engine, tag_of_schedule(engine, "m"))
    first_next = engine.periodic.get("m")["next_run_at"]
    # No leader for a minute: far more than the grace (lease TTL + leader rounds).
    engine.clock.advance(60)
    fire(engine, "m")
    runs = engine.periodic.get("m")["last_runs"]
    on_time = grace_ms(engine.config) // 1000
    assert [r["kind"] for r in runs][-2:] == kinds  # newest first: the missed ones are the oldest
    assert len([r for r in runs if r["kind"] == "tick"]) in (on_time, on_time + 1)  # ticks within the grace
    old = runs[-1]
    assert old["scheduled_for"] == first_next and old["missed"] >= 60 - on_time - 1
    catch_up = [t for t in fired(engine, "m") if t["scheduled_for"] == first_next]
    assert len(catch_up) == tasks - 1
    assert engine.periodic.get("m")["next_run_at"] > iso(engine.clock.now_ms())


def test_pause_fires_nothing_and_resume_follows_misfire(engine: Engine) -> None:
    for name, misfire in (("p.skip", "skip"), ("p.once", "run_once")):
        engine.periodic.create(every(name, 5, misfire=misfire), actor=ACTOR)
        lead(engine, tag_of_schedule(engine, name))
        view = engine.periodic.pause(name, actor=ACTOR)
        assert view["paused"] and view["next_run_at"] is None and view["paused_by"] == "user:ops"
    engine.clock.advance(60)
    assert engine.client.zrangebyscore(engine.keys.periodic_index(tag_of_schedule(engine, "p.skip")),
                                       "-inf", engine.clock.now_ms()) == []
    skip = engine.periodic.resume("p.skip", actor=ACTOR)
    once = engine.periodic.resume("p.once", actor=ACTOR)
    for view in (skip, once):
        assert view["next_run_at"] > iso(engine.clock.now_ms())  # from the next tick after now
        assert fire(engine, view["name"]) is None
    assert skip["last_runs"] == [] and fired(engine, "p.skip") == []  # the paused ticks are gone
    [catch_up] = once["last_runs"]  # one task for them all, fired by the resume
    assert catch_up["kind"] == "catch_up" and catch_up["missed"] == 12 and catch_up["status"] == "QUEUED"
    assert [t["id"] for t in fired(engine, "p.once")] == [catch_up["task_id"]]
    actions = [row["action"] for row in engine.audit.list().items]
    assert actions[:4] == ["periodic.resume", "periodic.resume", "periodic.pause", "periodic.create"]


def test_trigger_fires_now_and_leaves_the_next_tick(engine: Engine) -> None:
    engine.periodic.create(every("t", 3600, overlap="skip"), actor=ACTOR)
    engine.periodic.pause("t", actor=ACTOR)
    before = engine.periodic.get("t")
    out = engine.periodic.trigger("t", actor=ACTOR)
    again = engine.periodic.trigger("t", actor=ACTOR)  # an operator's fire ignores overlap
    assert out["scheduled_for"] == iso(engine.clock.now_ms()) and out["task_id"] != again["task_id"]
    after = engine.periodic.get("t")
    assert after["next_run_at"] == before["next_run_at"] and after["paused"]
    assert [r["kind"] for r in after["last_runs"]] == ["trigger", "trigger"]
    assert engine.tasks.get(out["task_id"])["periodic_name"] == "t"
    assert engine.audit.list().items[0]["action"] == "periodic.trigger"


def test_update_takes_effect_from_the_next_tick(engine: Engine) -> None:
    engine.periodic.create(every("u", 3600), actor=ACTOR)
    view = engine.periodic.update("u", {"cron": "*/5 * * * *", "payload": [1]}, actor=ACTOR)
    assert view["every_seconds"] is None and view["cron"] == "*/5 * * * *" and view["payload"] == [1]
    assert view["next_run_at"] == iso((engine.clock.now_ms() // 300_000 + 1) * 300_000)
    with pytest.raises(ValidationError):
        engine.periodic.update("u", {"name": "other"}, actor=ACTOR)
    with pytest.raises(ValidationError):
        engine.periodic.update("u", {"cron": "nope"}, actor=ACTOR)
    # Another queue: moved to that queue's first partition, history kept.
    lead(engine, tag_of_schedule(engine, "u"))
    engine.periodic.trigger("u", actor=ACTOR)
    moved = engine.periodic.update("u", {"queue": "elsewhere"}, actor=ACTOR)
    assert moved["queue"] == "elsewhere" and len(moved["last_runs"]) == 1
    assert tag_of_schedule(engine, "u") == engine.registry.get("elsewhere", fresh=True).tags[0]
    assert engine.periodic.trigger("u", actor=ACTOR)["task_id"].startswith(tag_of_schedule(engine, "u"))


def test_two_resumes_at_once_resume_once_and_fire_one_catch_up(engine: Engine) -> None:
    # A double-clicked Resume, or two API processes: one resumes and fires the one catch-up task
    # misfire=run_once promises; the other finds it running, changes nothing and says so (count 0).
    other = twin(engine)
    names = [f"r{i}" for i in range(15)]
    for name in names:
        engine.periodic.create(every(name, 5, misfire="run_once"), actor=ACTOR)
        engine.periodic.pause(name, actor=ACTOR)
    engine.clock.advance(60)  # 12 ticks pass while paused
    for name in names:
        answers = at_once(lambda n=name: engine.periodic.resume(n, actor=ACTOR),
                          lambda n=name: other.periodic.resume(n, actor=ACTOR))
        assert all(isinstance(a, dict) and not a["paused"] for a in answers), answers
    assert {name: len(fired(engine, name)) for name in names} == {name: 1 for name in names}
    resumes = engine.audit.list(action="periodic.resume", limit=500).items
    counts = {name: sorted(e["count"] for e in resumes if e["target"] == f"periodic:{name}") for name in names}
    assert counts == {name: [0, 1] for name in names}


def test_two_patches_at_once_keep_both_changes(engine: Engine) -> None:
    # Two operators change different fields at the same moment: both answer with their change,
    # and both changes are kept (a PATCH changes only the fields given).
    other = twin(engine)
    for i in range(15):
        name = f"p{i}"
        engine.periodic.create(every(name, 60), actor=ACTOR)
        a, b = at_once(lambda n=name: engine.periodic.update(n, {"payload": {"n": 2}}, actor=ACTOR),
                       lambda n=name: other.periodic.update(n, {"priority": "high"}, actor=ACTOR))
        assert isinstance(a, dict) and isinstance(b, dict), (a, b)
        view = engine.periodic.get(name)
        assert (view["payload"], view["priority"]) == ({"n": 2}, "high"), name


def test_a_patch_racing_a_resume_leaves_a_schedule_shown_running_due_for_the_leader(engine: Engine) -> None:
    # Whichever lands first, a schedule shown running with a next_run_at is one the leader's
    # index finds due at that tick (never +inf: it would never fire again).
    other = twin(engine)
    for i in range(15):
        name = f"s{i}"
        engine.periodic.create(every(name, 1), actor=ACTOR)
        engine.periodic.pause(name, actor=ACTOR)
        a, b = at_once(lambda n=name: engine.periodic.resume(n, actor=ACTOR),
                       lambda n=name: other.periodic.update(n, {"payload": {"new": True}}, actor=ACTOR))
        assert isinstance(a, dict) and isinstance(b, dict), (a, b)
        view = engine.periodic.get(name)
        assert not view["paused"] and view["payload"] == {"new": True}
        score = engine.client.zscore(engine.keys.periodic_index(tag_of_schedule(engine, name)), name)
        assert score is not None and iso(int(score)) == view["next_run_at"], (name, score, view["next_run_at"])


def test_a_change_that_keeps_losing_to_others_is_refused_and_writes_nothing(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine.periodic.create(every("busy", 60), actor=ACTOR)
    load = engine.periodic._load

    def overtaken(name: str) -> Any:  # another process changes it right after every read
        stored = load(name)
        engine.client.hincrby(engine.keys.periodic(stored.tag, name), "rev", 1)
        return stored

    monkeypatch.setattr(engine.periodic, "_load", overtaken)
    with pytest.raises(PeriodicConflict):
        engine.periodic.update("busy", {"payload": {"n": 2}}, actor=ACTOR)
    assert engine.periodic.get("busy")["payload"] == {"n": 1}
    assert [e["action"] for e in engine.audit.list().items] == ["periodic.create"]


def test_a_resume_catch_up_is_skipped_while_the_last_run_is_unfinished(engine: Engine) -> None:
    # overlap=skip holds for the task a misfire=run_once resume fires, as for the leader's catch-up.
    engine.clock.advance((5000 - engine.clock.now_ms() % 5000) / 1000)
    engine.periodic.create(every("slow", 5, overlap="skip", misfire="run_once"), actor=ACTOR)
    lead(engine, tag_of_schedule(engine, "slow"))
    engine.clock.advance(5.5)
    _, running, _ = fire(engine, "slow")
    engine.periodic.pause("slow", actor=ACTOR)
    engine.clock.advance(60)
    view = engine.periodic.resume("slow", actor=ACTOR)
    assert [t["id"] for t in fired(engine, "slow")] == running  # the run before the pause: still QUEUED
    assert [(r["kind"], r["status"], r["missed"]) for r in view["last_runs"][:1]] == [("catch_up", "SKIPPED", 12)]
    engine.tasks.cancel(running[0], ACTOR)  # finished: the next resume's catch-up fires
    engine.periodic.pause("slow", actor=ACTOR)
    engine.clock.advance(60)
    view = engine.periodic.resume("slow", actor=ACTOR)
    assert view["last_runs"][0]["kind"] == "catch_up" and view["last_runs"][0]["status"] == "QUEUED"
    assert len(fired(engine, "slow")) == 2


def test_overlap_skip_holds_after_a_move_to_another_queue(engine: Engine) -> None:
    # The run left in the old queue's partition still counts: the leader reads it there.
    engine.clock.advance((1000 - engine.clock.now_ms() % 1000) / 1000)
    engine.periodic.create(every("slow", 1, overlap="skip", queue="first"), actor=ACTOR)
    lead(engine, tag_of_schedule(engine, "slow"))
    engine.clock.advance(1.1)
    assert leader_round(engine, "slow", LEADER) == 1
    [running] = fired(engine, "slow")
    engine.periodic.update("slow", {"queue": "second"}, actor=ACTOR)
    lead(engine, tag_of_schedule(engine, "slow"))
    engine.clock.advance(1)
    assert leader_round(engine, "slow", LEADER) == 0
    assert engine.periodic.get("slow")["last_runs"][0]["status"] == "SKIPPED"
    engine.tasks.cancel(running["id"], ACTOR)  # finished: the next tick fires, in the new queue
    engine.clock.advance(1)
    assert leader_round(engine, "slow", LEADER) == 1
    assert [t["queue"] for t in fired(engine, "slow")] == ["second", "first"]


def test_changes_from_a_host_whose_clock_is_off_tick_on_redis_time(config: DtqConfig) -> None:
    # An API or CLI host two minutes ahead (no NTP, a VM resumed): create, PATCH and resume compute
    # the next tick on Redis's clock, the one the leader fires by, not a hundred ticks later.
    engine = Engine(config, clock=AheadClock())

    def next_tick_within(view: dict[str, Any], seconds: float, since: int) -> bool:
        return since < ms(view["next_run_at"]) <= redis_ms(engine) + seconds * 1000

    since = redis_ms(engine)
    assert next_tick_within(engine.periodic.create(every("beat", 2), actor=ACTOR), 2, since)
    since = redis_ms(engine)
    assert next_tick_within(engine.periodic.update("beat", {"every_seconds": 3}, actor=ACTOR), 3, since)
    paused = engine.periodic.pause("beat", actor=ACTOR)
    assert ms(paused["paused_at"]) <= redis_ms(engine)
    since = redis_ms(engine)
    assert next_tick_within(engine.periodic.resume("beat", actor=ACTOR), 3, since)


def test_delete_stops_it(engine: Engine) -> None:
    engine.periodic.create(every("d", 1), actor=ACTOR)
    tag = tag_of_schedule(engine, "d")
    lead(engine, tag)
    engine.clock.advance(1)
    h = engine.client.hgetall(engine.keys.periodic(tag, "d"))
    p = plan(every(seconds=1).ticks, int(h["next"]), engine.clock.now_ms(), grace_ms(engine.config), "skip")
    engine.periodic.delete("d", actor=ACTOR)
    args = engine.periodic.fire_args(tag, None, "d", LEADER, p, "skip", engine.clock.now_ms(), rev=h["rev"])
    assert engine.scripts("firePeriodic", keys=[engine.keys.partition(tag)], args=args) == \
        [ErrorCode.PERIODIC_NOT_FOUND]
    assert engine.client.zcard(engine.keys.periodic_index(tag)) == 0
    with pytest.raises(PeriodicNotFound):
        engine.periodic.delete("d", actor=ACTOR)


def test_a_queue_with_schedules_is_not_deleted(engine: Engine) -> None:
    engine.periodic.create(every("q", 60, queue="holds"), actor=ACTOR)
    with pytest.raises(QueueNotEmpty) as caught:
        engine.queues.delete("holds", ACTOR)
    assert "q" in caught.value.message and caught.value.details["periodic"] == ["q"]
    engine.periodic.delete("q", actor=ACTOR)
    engine.queues.delete("holds", ACTOR)


def test_sync_declared_adds_changes_and_retires_code_schedules(engine: Engine) -> None:
    engine.periodic.create(every("api.one", 60), actor=ACTOR)
    report = engine.periodic.sync_declared([every("code.a", 60), every("code.b", 60), every("api.one", 5)])
    assert report["added"] == ["code.a", "code.b"] and report["conflicts"] == ["api.one"]
    assert engine.periodic.get("api.one")["every_seconds"] == 60  # the API's one is left alone
    engine.periodic.pause("code.a", actor=ACTOR)  # an operator may pause a declared one
    with pytest.raises(PeriodicDeclaredInCode):
        engine.periodic.update("code.a", {"every_seconds": 5}, actor=ACTOR)
    with pytest.raises(PeriodicDeclaredInCode):
        engine.periodic.delete("code.b", actor=ACTOR)
    report = engine.periodic.sync_declared([every("code.a", 30)], served_types=frozenset({"dtq.echo"}))
    assert report["changed"] == ["code.a"] and report["retired"] == ["code.b"]
    a = engine.periodic.get("code.a")
    assert a["every_seconds"] == 30 and a["paused"] and a["source"] == "code"
    assert [s["name"] for s in engine.periodic.list()] == ["api.one", "code.a"]
    # A worker that does not serve a schedule's type does not retire it (another deployment's).
    assert engine.periodic.sync_declared([], served_types=frozenset({"other.type"}))["retired"] == []
    assert engine.periodic.sync_declared([every("code.a", 30)])["unchanged"] == ["code.a"]
    assert engine.audit.list(source="worker").items[0]["actor"] == "code:sync"


def test_a_declared_schedule_that_cannot_be_written_does_not_stop_the_others(engine: Engine) -> None:
    limited = Engine(dataclasses.replace(engine.config, max_queues=1), clock=engine.clock)
    report = limited.periodic.sync_declared([every("fits", 60, queue="one"), every("too.many", 60, queue="two")])
    assert report["added"] == ["fits"] and report["failed"] == ["too.many"]
    assert [s["name"] for s in limited.periodic.list()] == ["fits"]


def test_a_stored_schedule_this_version_refuses_is_listed_and_mended_by_a_patch(engine: Engine) -> None:
    # An earlier version took `timezone: "localtime"` (a different instant on each host).
    engine.periodic.create(PeriodicSpec(name="old", type="dtq.echo", cron="0 3 * * *", timezone="Europe/Berlin"),
                           actor=ACTOR)
    key = engine.keys.periodic(tag_of_schedule(engine, "old"), "old")
    spec = json.loads(engine.client.hget(key, "spec"))
    engine.client.hset(key, "spec", json.dumps({**spec, "timezone": "localtime"}))
    [listed] = engine.periodic.list()
    assert listed["timezone"] == "localtime" and "cannot be evaluated" in listed["description"]
    engine.periodic.pause("old", actor=ACTOR)
    with pytest.raises(ValidationError) as refused:
        engine.periodic.resume("old", actor=ACTOR)
    assert refused.value.field == "timezone"
    mended = engine.periodic.update("old", {"timezone": "Europe/Berlin"}, actor=ACTOR)
    assert mended["description"] == "At 03:00 (Europe/Berlin)"
    assert engine.periodic.resume("old", actor=ACTOR)["paused"] is False


def test_a_move_to_a_queue_that_cannot_be_made_keeps_the_schedule_where_it_was(engine: Engine) -> None:
    engine.periodic.create(every("beat", 60), actor=ACTOR)
    engine.periodic.pause("beat", actor=ACTOR)
    before = engine.periodic.get("beat")
    full = Engine(dataclasses.replace(engine.config, max_queues=len(engine.queues.names())), clock=engine.clock)
    with pytest.raises(QueueLimitReached):
        full.periodic.update("beat", {"queue": "elsewhere"}, actor=ACTOR)
    after = engine.periodic.get("beat")
    assert after["queue"] == "default" and after["paused"] is True
    assert {k: after[k] for k in ("payload", "paused_at", "created_at")} == \
        {k: before[k] for k in ("payload", "paused_at", "created_at")}
    assert "elsewhere" not in engine.queues.names()


def test_a_move_whose_target_queue_is_deleted_meanwhile_puts_the_schedule_back(engine: Engine) -> None:
    engine.periodic.create(every("beat", 60), actor=ACTOR)
    other = twin(engine)
    other.registry.ensure("elsewhere")  # this process holds the queue's layout from an earlier read
    engine.queues.delete("elsewhere", ACTOR)
    with pytest.raises(PartitionClosed):
        other.periodic.update("beat", {"queue": "elsewhere"}, actor=ACTOR)
    back = engine.periodic.get("beat")
    assert back["queue"] == "default" and back["paused"] is False and back["next_run_at"] is not None
    # And the change goes through once the process reads the queue again.
    assert other.periodic.update("beat", {"queue": "elsewhere"}, actor=ACTOR)["queue"] == "elsewhere"
