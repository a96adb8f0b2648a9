"""The advance scripts on a real redis-server, without workers: a step's end is applied once
however often a crash repeats its advance, and a group's callback is created exactly once even
when its last two members' advances run at the same moment in two processes' threads."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import redis

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import QueueLimitReached, QueueNotEmpty, ValidationError, WorkflowNotFound, WorkflowTerminal
from dtq_core.keys import tag_of, workflow_tag
from dtq_core.worker.workflows import WorkflowDriver
from dtq_core.workflow_spec import parse
from dtq_core.workflow_steps import advance_call, create_calls, ready_of, start_calls

from ..worker.support import store as worker_store


def _submit(engine: Engine, spec: dict[str, Any]) -> tuple[str, list[str]]:
    wid = engine.workflows.submit(spec)
    return wid, [s["task_id"] for s in engine.workflows.get(wid)["steps"]]


def _advance(engine: Engine, wid: str, step: int, task_id: str, status: str = "SUCCEEDED", r: str = "1") -> Any:
    name, keys, args = advance_call(engine.keys, engine.config, task_id, {"w": wid, "s": step, "st": status, "r": r},
                                    engine.clock.now_ms())
    return engine.scripts(name, keys=[keys[0]], args=args)


def _create(engine: Engine, wid: str, reply: Any) -> list[str]:
    """What a driver does with an advance's reply: create the ready steps, record them started.
    Returns createSteps' answers ('created' / 'exists')."""
    ready = ready_of(wid, reply)[1]
    out = []
    for name, keys, args in create_calls(engine.keys, engine.config, ready, engine.clock.now_ms(), 0):
        out += engine.scripts(name, keys=[keys[0]], args=args)
    for name, keys, args in start_calls(engine.keys, engine.config, ready):
        engine.scripts(name, keys=[keys[0]], args=args)
    return out


def test_an_advance_repeated_after_a_crash_changes_nothing_twice(engine: Engine) -> None:
    wid, ids = _submit(engine, {"group": [{"type": "t.a"}, {"type": "t.b"}], "then": {"type": "t.sum"}})
    first = _advance(engine, wid, 0, ids[0], r="2")
    assert first == ["ok", "RUNNING", []]
    assert _advance(engine, wid, 0, ids[0], r="2") == ["ok", "RUNNING", []]  # repeated: counted once
    second = _advance(engine, wid, 1, ids[1], r="3")
    (ready,) = ready_of(wid, second)[1]
    assert (ready.index, ready.input_json, ready.task_id) == (2, "[2,3]", ids[2])
    # A crash before the callback was created: the re-driven advance of either member names it again...
    again = _advance(engine, wid, 0, ids[0], r="2")
    assert [r.index for r in ready_of(wid, again)[1]] == [2]
    # ...and creating it twice creates it once.
    assert _create(engine, wid, second) == ["created"]
    assert _create(engine, wid, again) == ["exists"]
    assert engine.tasks.get(ids[2])["status"] == "QUEUED"
    # Once recorded as created, no repeat names it.
    assert _advance(engine, wid, 1, ids[1], r="3") == ["ok", "RUNNING", []]
    wf = engine.workflows.get(wid)
    assert wf["steps_finished"] == 2 and wf["status"] == "RUNNING"
    assert engine.tasks.get(ids[2])["workflow_id"] == wid


def test_the_last_two_members_finishing_at_once_start_the_callback_once(engine: Engine) -> None:
    # Two threads, each the driver of one member's end (advance, create, record), released together,
    # over many workflows: the callback's task is created once per workflow, never twice or not at all.
    runs = 40
    workflows = [_submit(engine, {"group": [{"type": "t.a"}, {"type": "t.b"}], "then": {"type": "t.sum"}})
                 for _ in range(runs)]
    created: list[list[str]] = [[] for _ in range(runs)]
    barrier = threading.Barrier(2)

    def member(step: int) -> None:
        for n, (wid, ids) in enumerate(workflows):
            barrier.wait()
            reply = _advance(engine, wid, step, ids[step], r=str(step + 1))
            created[n] += _create(engine, wid, reply)

    threads = [threading.Thread(target=member, args=(i,)) for i in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    for n, (_wid, ids) in enumerate(workflows):
        assert created[n].count("created") == 1, created[n]
        record = engine.tasks.record(ids[2])[0]
        assert record["parent_result"] == "[1,2]"
    entries = sum(engine.client.xlen(s) for s in engine.keys.streams(tag_of(workflows[0][1][2]), "default"))
    assert entries == 2 * runs + runs  # each workflow's two members and one callback


def test_a_failure_cancels_what_depends_on_it_and_its_success_resumes(engine: Engine) -> None:
    wid, ids = _submit(engine, {"chain": [{"type": "t.a"}, {"type": "t.b"},
                                          {"group": [{"type": "t.c"}, {"type": "t.d"}], "then": {"type": "t.e"}}]})
    _create(engine, wid, _advance(engine, wid, 0, ids[0], r='"a"'))
    assert _advance(engine, wid, 1, ids[1], "DEAD_LETTERED", "ValueError: boom") == ["ok", "FAILED", []]
    wf = engine.workflows.get(wid)
    assert wf["status"] == "FAILED" and wf["finished_at"] is not None
    assert [s["status"] for s in wf["steps"][2:]] == ["CANCELLED"] * 3
    assert {s["cancel_reason"] for s in wf["steps"][2:]} == {f"step 1 (task {ids[1]}) ended DEAD_LETTERED"}
    # The same task succeeding later (a DLQ retry): the workflow reopens, the cancelled steps run.
    reply = _advance(engine, wid, 1, ids[1], r='"b"')
    assert reply[1] == "RUNNING" and [r.index for r in ready_of(wid, reply)[1]] == [2, 3]
    assert {r.input_json for r in ready_of(wid, reply)[1]} == {'"b"'}
    assert engine.workflows.get(wid)["finished_at"] is None


def test_a_tolerated_failure_gives_the_callback_the_error_in_its_place(engine: Engine) -> None:
    wid, ids = _submit(engine, {"group": [{"type": "t.a"}, {"type": "t.b"}], "then": {"type": "t.sum"},
                                "tolerate_failures": True})
    _advance(engine, wid, 0, ids[0], "DEAD_LETTERED", "ValueError: boom")
    (ready,) = ready_of(wid, _advance(engine, wid, 1, ids[1], r="5"))[1]
    assert json.loads(ready.input_json) == [
        {"error": {"class": "ValueError", "message": "boom", "status": "DEAD_LETTERED"}}, 5]
    assert engine.workflows.get(wid)["status"] == "RUNNING"


def test_an_advance_for_another_task_or_a_missing_workflow_is_dropped(engine: Engine) -> None:
    wid, ids = _submit(engine, {"chain": [{"type": "t.a"}, {"type": "t.b"}]})
    assert _advance(engine, wid, 0, ids[1]) == ["stale"]
    # Another id of the same partition: the last hex digit changed, so never the workflow's own
    # (a fixed tail like "abc" would be wid itself once in 4,096 runs).
    gone = wid[:-1] + ("0" if wid[-1] != "0" else "1")
    assert _advance(engine, gone, 0, ids[0]) == ["missing"]
    with pytest.raises(WorkflowNotFound):
        engine.workflows.get(gone)
    with pytest.raises(WorkflowNotFound):
        engine.workflows.get(ids[0])  # a task id is not a workflow id


def test_the_submit_creates_only_the_steps_without_dependencies(engine: Engine) -> None:
    wid, ids = _submit(engine, {"chain": [{"group": [{"type": "t.a"}, {"type": "t.b", "queue": "other"}]},
                                          {"type": "t.c"}]})
    wf = engine.workflows.get(wid)
    assert [s["status"] for s in wf["steps"]] == ["QUEUED", "QUEUED", "WAITING"]
    assert wf["steps"][2]["depends_on"] == [0, 1]
    assert wf["root"] == {"kind": "chain", "children": [
        {"kind": "group", "children": [{"kind": "step", "index": 0}, {"kind": "step", "index": 1}],
         "then": None, "tolerate_failures": False}, {"kind": "step", "index": 2}]}
    assert wid.startswith(tag_of(ids[0]) + "-w")
    # The start was advanced and settled by the submit; advanced again (a re-drive), it creates nothing.
    assert not engine.client.hexists(engine.keys.wf_outbox(tag_of(ids[0])), f"wf:{wid}")
    assert _advance(engine, wid, -1, f"wf:{wid}", "START", "") == ["ok", "RUNNING", []]
    rows, cursor = engine.workflows.list()
    assert [r["id"] for r in rows] == [wid] and cursor is None
    assert engine.workflows.list(status="SUCCEEDED") == ([], None)


@pytest.mark.parametrize(("spec", "field"), [
    ({"chain": []}, "chain"),
    ({"chain": [{"type": "t.a"}, {"type": "bad type"}]}, "chain[1].type"),
    ({"chain": [{"type": "t.a", "payload": {"x": float("nan")}}]}, "chain[0].payload"),
    ({"group": [{"type": "t.a"}], "then": {"type": "t.b", "queue": "Bad!"}}, "then.queue"),
    ({"chain": [{"group": [{"type": "t.a", "priority": "urgent"}]}]}, "chain[0].group[0].priority"),
    ({"chain": [{"type": "t.a", "colour": "red"}]}, "chain[0].colour"),
    ({"group": [{"type": "t.a"}], "tolerate_failures": "yes"}, "tolerate_failures"),
    ({"chain": "t.a"}, "chain"),
    ({"chain": [{"payload": {}}]}, "chain[0].type"),
])
def test_a_malformed_workflow_is_refused_naming_the_field(engine: Engine, spec: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as caught:
        engine.workflows.submit(spec)
    assert caught.value.field == field


def test_limits_on_size_and_depth(engine: Engine) -> None:
    deep: dict[str, Any] = {"type": "t.a"}
    for _ in range(40):
        deep = {"chain": [deep]}
    with pytest.raises(ValidationError, match="32 levels"):
        engine.workflows.submit(deep)
    assert engine.config.workflow_max_steps == 20000  # a group of 10,000 with its callback fits
    small = Engine(dataclasses.replace(engine.config, workflow_max_steps=100))
    with pytest.raises(ValidationError, match="at most 100 steps"):
        small.workflows.submit({"group": [{"type": "t.a"}] * 101})


def test_an_input_larger_than_the_payload_limit_is_cut_like_a_result(config: Any) -> None:
    import dataclasses

    engine = Engine(dataclasses.replace(config, payload_max_bytes=100))
    wid, ids = _submit(engine, {"group": [{"type": "t.a"}, {"type": "t.b"}], "then": {"type": "t.sum"}})
    _advance(engine, wid, 0, ids[0], r=json.dumps("x" * 80))
    reply = _advance(engine, wid, 1, ids[1], r=json.dumps("y" * 80))
    assert _create(engine, wid, reply) == ["created"]
    record = engine.tasks.record(ids[2])[0]
    assert record["parent_result_truncated"] == "1"
    head = json.loads(record["parent_result"])
    assert isinstance(head, str) and head.startswith('["xxx') and len(record["parent_result"].encode()) <= 100


def test_the_listing_pages_newest_first_with_a_stable_cursor_and_a_status_filter(engine: Engine) -> None:
    made = []
    for _ in range(7):
        made.append(engine.workflows.submit({"type": "t.a"}))
        engine.clock.advance(0.001)  # type: ignore[attr-defined]
    made.reverse()  # newest first
    engine.workflows.cancel(made[1], Actor(name="user:test", source="cli"))
    page, cursor = engine.workflows.list(limit=3)
    assert [r["id"] for r in page] == made[:3] and cursor
    engine.workflows.submit({"type": "t.a"})  # a new one in front does not shift the next page
    page2, cursor2 = engine.workflows.list(limit=3, cursor=cursor)
    assert [r["id"] for r in page2] == made[3:6]
    page3, cursor3 = engine.workflows.list(limit=3, cursor=cursor2)
    assert [r["id"] for r in page3] == made[6:] and cursor3 is None
    cancelled, _ = engine.workflows.list(status="CANCELLED")
    assert [(r["id"], r["status"]) for r in cancelled] == [(made[1], "CANCELLED")]
    for bad in ("x", "12:nope", "-1:" + made[0]):
        with pytest.raises(ValidationError):
            engine.workflows.list(cursor=bad)
    with pytest.raises(ValidationError):
        engine.workflows.list(status="DONE")
    with pytest.raises(ValidationError):
        engine.workflows.list(limit=0)


@pytest.mark.parametrize("order", ["created_then_cancelled", "cancelled_then_created"])
def test_a_step_created_around_its_workflows_cancel_is_cancelled(engine: Engine, order: str) -> None:
    wid, ids = _submit(engine, {"chain": [{"type": "t.a"}, {"type": "t.b"}]})
    ready = ready_of(wid, _advance(engine, wid, 0, ids[0]))[1]
    creates = create_calls(engine.keys, engine.config, ready, engine.clock.now_ms(), 0)
    actor = Actor(name="user:test", source="cli")
    if order == "created_then_cancelled":
        # An advance's driver created the step and died before recording it: the cancel finds it.
        for name, keys, args in creates:
            engine.scripts(name, keys=[keys[0]], args=args)
        engine.workflows.cancel(wid, actor)
    else:
        # The cancel came between the advance and the creation: recording it cancels the task.
        engine.workflows.cancel(wid, actor)
        for name, keys, args in creates:
            engine.scripts(name, keys=[keys[0]], args=args)
        engine.workflows._started(ready)
    assert engine.tasks.get(ids[1])["status"] == "CANCELLED"
    wf = engine.workflows.get(wid)
    assert wf["status"] == "CANCELLED" and wf["steps"][1]["status"] == "CANCELLED"


def test_a_redis_that_is_down_is_reported_as_redis_trouble_not_a_crash(config: Any) -> None:
    import dataclasses

    import redis

    from ..redis_server import free_port

    engine = Engine(dataclasses.replace(config, redis_url=f"redis://127.0.0.1:{free_port()}/0"))
    wid = f"{TAG}-w{'0' * 31}"
    for call in (lambda: engine.workflows.submit({"type": "t.a"}), lambda: engine.workflows.get(wid),
                 lambda: engine.workflows.list(), lambda: engine.workflows.cancel(wid, Actor.cli())):
        with pytest.raises(redis.exceptions.ConnectionError):
            call()


TAG = "ab12cd"


# -- a tolerated failure ends its member (docs/tasks.md, "Failure, retry from the DLQ, cancel") -----------

ERROR = {"error": {"class": "ValueError", "message": "boom", "status": "DEAD_LETTERED"}}


def _states(engine: Engine, wid: str) -> list[str]:
    return [s["status"] for s in engine.workflows.get(wid)["steps"]]


def test_a_failure_inside_a_tolerant_groups_chain_member_ends_that_member(engine: Engine) -> None:
    # group(tolerate)[a, chain[gate, b, c]] then sum: the gate dead-letters. b and c never run (they
    # would get an error object for the gate's result); the member's place holds the gate's error.
    wid, ids = _submit(engine, {"group": [{"type": "t.a"}, {"chain": [{"type": "t.gate"}, {"type": "t.b"},
                                                                      {"type": "t.c"}]}],
                                "then": {"type": "t.sum"}, "tolerate_failures": True})
    assert _advance(engine, wid, 1, ids[1], "DEAD_LETTERED", "ValueError: boom") == ["ok", "RUNNING", []]
    assert _states(engine, wid) == ["QUEUED", "QUEUED", "CANCELLED", "CANCELLED", "WAITING"]
    wf = engine.workflows.get(wid)
    assert {s["cancel_reason"] for s in wf["steps"][2:4]} == {
        f"step 1 (task {ids[1]}) ended DEAD_LETTERED; its group tolerates failures"}
    assert wf["steps_finished"] == 3 and wf["status"] == "RUNNING"
    # Repeated (a crash), the failure skips nothing twice.
    assert _advance(engine, wid, 1, ids[1], "DEAD_LETTERED", "ValueError: boom") == ["ok", "RUNNING", []]
    assert engine.workflows.get(wid)["steps_finished"] == 3
    (ready,) = ready_of(wid, _advance(engine, wid, 0, ids[0], r="1"))[1]
    assert ready.index == 4 and json.loads(ready.input_json) == [1, ERROR]
    assert _create(engine, wid, _advance(engine, wid, 0, ids[0], r="1")) == ["created"]
    assert _advance(engine, wid, 4, ids[4], r="2")[1] == "SUCCEEDED"
    assert engine.client.exists(engine.keys.task(ids[2]), engine.keys.task(ids[3])) == 0  # never created


def test_a_tolerated_failure_in_a_nested_tolerant_group_ends_only_the_inner_member(engine: Engine) -> None:
    # group(tolerate)[chain[group(tolerate)[gate, b], c], d] then e: the gate's failure is its own
    # member's end (the inner group); c runs on the inner group's results, the error among them.
    wid, ids = _submit(engine, {"group": [
        {"chain": [{"group": [{"type": "t.gate"}, {"type": "t.b"}], "tolerate_failures": True}, {"type": "t.c"}]},
        {"type": "t.d"}], "then": {"type": "t.e"}, "tolerate_failures": True})
    assert _advance(engine, wid, 0, ids[0], "DEAD_LETTERED", "ValueError: boom") == ["ok", "RUNNING", []]
    (ready,) = ready_of(wid, _advance(engine, wid, 1, ids[1], r="2"))[1]
    assert ready.index == 2 and json.loads(ready.input_json) == [ERROR, 2]


def test_a_failure_in_a_plain_group_inside_a_tolerated_member_ends_the_member(engine: Engine) -> None:
    # group(tolerate)[chain[group[gate, b], c], d] then e: the inner group does not tolerate, so the
    # gate's failure ends the outer member: c is skipped at once, e runs once d is done, while b,
    # started before the failure, runs on; the workflow ends when b does.
    wid, ids = _submit(engine, {"group": [
        {"chain": [{"group": [{"type": "t.gate"}, {"type": "t.b"}]}, {"type": "t.c"}]},
        {"type": "t.d"}], "then": {"type": "t.e"}, "tolerate_failures": True})
    _advance(engine, wid, 0, ids[0], "DEAD_LETTERED", "ValueError: boom")
    (ready,) = ready_of(wid, _advance(engine, wid, 3, ids[3], r="4"))[1]
    assert ready.index == 4 and json.loads(ready.input_json) == [ERROR, 4]
    _create(engine, wid, _advance(engine, wid, 3, ids[3], r="4"))
    assert _advance(engine, wid, 4, ids[4], r="5") == ["ok", "RUNNING", []]  # b still runs
    assert _advance(engine, wid, 1, ids[1], r="2") == ["ok", "SUCCEEDED", []]
    assert engine.client.exists(engine.keys.task(ids[2])) == 0


def test_each_member_of_a_tolerant_group_is_told_apart_with_its_nested_members(config: Any) -> None:
    spec = parse({"chain": [{"type": "t.first"}, {"group": [
        {"chain": [{"type": "t.a"}, {"group": [{"type": "t.b"}, {"type": "t.c"}], "tolerate_failures": True,
                                     "then": {"type": "t.d"}}]},
        {"group": [{"type": "t.e"}, {"type": "t.f"}]}], "then": {"type": "t.g"}, "tolerate_failures": True}]},
        config)
    assert [(s.submission.type, s.member) for s in spec.steps] == [
        ("t.first", ""), ("t.a", "1"), ("t.b", "1.2"), ("t.c", "1.3"), ("t.d", "1"), ("t.e", "4"), ("t.f", "4"),
        ("t.g", "")]


# -- cancelling a FAILED workflow whose other branches run on ----------------------------------------------

ACTOR = Actor(name="user:test", source="cli")


def test_a_failed_workflow_with_work_left_can_be_cancelled_and_a_dlq_retry_does_not_resume_it(
        engine: Engine) -> None:
    # group[gate, chain[a, b, c]]: the gate fails, a runs on. The cancel stops a (its task), and b
    # and c never start; the workflow stays FAILED (how it ended), and a second cancel is refused.
    wid, ids = _submit(engine, {"group": [{"type": "t.gate"}, {"chain": [{"type": "t.a"}, {"type": "t.b"},
                                                                         {"type": "t.c"}]}]})
    assert _advance(engine, wid, 0, ids[0], "DEAD_LETTERED", "ValueError: boom")[1] == "FAILED"
    wf = engine.workflows.cancel(wid, ACTOR)
    assert wf["status"] == "FAILED"
    assert [s["status"] for s in wf["steps"]] == ["QUEUED", "CANCELLED", "CANCELLED", "CANCELLED"]
    assert [s["cancel_reason"] for s in wf["steps"][2:]] == ["workflow cancelled"] * 2
    with pytest.raises(WorkflowTerminal, match="nothing left"):
        engine.workflows.cancel(wid, ACTOR)
    # a's end (cancelled) and the gate's DLQ retry succeeding reach the workflow: nothing resumes.
    assert _advance(engine, wid, 1, ids[1], "CANCELLED", "") == ["ok", "FAILED", []]
    assert _advance(engine, wid, 0, ids[0], r="1") == ["ok", "FAILED", []]
    assert engine.workflows.get(wid)["status"] == "FAILED"
    assert _forever(engine, wid) == {}
    (entry, *_) = engine.audit.list(action="workflow.cancel").items
    assert entry["target"] == f"workflow:{wid}"


def test_a_failed_workflow_with_nothing_left_cannot_be_cancelled(engine: Engine) -> None:
    wid, ids = _submit(engine, {"chain": [{"type": "t.a"}, {"type": "t.gate"}, {"type": "t.b"}]})
    _create(engine, wid, _advance(engine, wid, 0, ids[0]))
    assert _advance(engine, wid, 1, ids[1], "DEAD_LETTERED", "ValueError: boom")[1] == "FAILED"
    with pytest.raises(WorkflowTerminal, match="already FAILED"):
        engine.workflows.cancel(wid, ACTOR)
    assert engine.audit.list(action="workflow.cancel").items == []  # a refusal withdraws its intent


# -- expiry: every key of a finished workflow, once nothing of it runs, has a TTL ---------------------------

def _ttls(engine: Engine, wid: str) -> dict[str, int]:
    """Each key of the workflow -> its PTTL (-1: none)."""
    keys = list(engine.client.scan_iter(match=engine.keys.workflow(wid) + "*", count=1000))
    assert keys, "the workflow has keys"
    return {k: engine.client.pttl(k) for k in keys}


def _forever(engine: Engine, wid: str) -> dict[str, int]:
    """The workflow's keys that have no TTL."""
    return {k: t for k, t in _ttls(engine, wid).items() if t < 0}


def _cancel_tasks(engine: Engine, wid: str) -> None:
    engine.workflows.cancel(wid, ACTOR)


def _end_all(engine: Engine, wid: str, ids: list[str], status: str) -> None:
    for step in engine.workflows.get(wid)["steps"]:
        if step["status"] in ("QUEUED", "RUNNING", status):
            _create(engine, wid, _advance(engine, wid, step["index"], ids[step["index"]], status, ""))


SCENARIOS: dict[str, tuple[dict[str, Any], list[tuple[int, str, str]]]] = {
    # (the tree, the ends that reach it in order: step, final status, result or error)
    "succeeded": ({"chain": [{"type": "t.a"}, {"type": "t.b"}]}, [(0, "SUCCEEDED", "1"), (1, "SUCCEEDED", "2")]),
    "failed, then its other branch succeeds": (
        {"group": [{"type": "t.gate"}, {"chain": [{"type": "t.a"}, {"type": "t.b"}]}]},
        [(0, "DEAD_LETTERED", "ValueError: boom"), (1, "SUCCEEDED", "1"), (2, "SUCCEEDED", "2")]),
    "failed, then its other branch fails": (
        {"group": [{"type": "t.gate"}, {"chain": [{"type": "t.a"}, {"type": "t.b"}]}]},
        [(0, "DEAD_LETTERED", "ValueError: boom"), (1, "FAILED", "ValueError: no")]),
    "tolerated failure": (
        {"group": [{"type": "t.gate"}, {"type": "t.a"}], "then": {"type": "t.b"}, "tolerate_failures": True},
        [(0, "DEAD_LETTERED", "ValueError: boom"), (1, "SUCCEEDED", "1"), (2, "SUCCEEDED", "2")]),
}


@pytest.mark.parametrize("scenario", [*SCENARIOS, "cancelled, its steps ending after", "failed, then cancelled"])
def test_no_key_of_a_finished_workflow_is_left_without_a_ttl(engine: Engine, scenario: str) -> None:
    # docs/keyspace.md: a workflow's keys expire DTQ_TASK_RETENTION_S after it finished and none of
    # its steps runs any more; a part first written after the finish (a late step's reason or
    # result) gets the same TTL. A FAILED workflow whose other branches run on keeps its keys
    # without one until they end (else a long branch would find its workflow gone).
    keep = engine.config.task_retention_s * 1000
    if scenario in SCENARIOS:
        spec, ends = SCENARIOS[scenario]
        wid, ids = _submit(engine, spec)
        for n, (step, status, r) in enumerate(ends):
            status_now = ready_of(wid, reply := _advance(engine, wid, step, ids[step], status, r))[0]
            _create(engine, wid, reply)
            if n < len(ends) - 1:  # more to come: a FAILED workflow keeps its keys for good
                assert status_now in ("RUNNING", "FAILED") and set(_ttls(engine, wid).values()) == {-1}, status_now
    elif scenario == "cancelled, its steps ending after":
        wid, ids = _submit(engine, {"group": [{"type": "t.a"}, {"type": "t.b"}]})
        engine.workflows.cancel(wid, ACTOR)
        _end_all(engine, wid, ids, "CANCELLED")
    else:
        wid, ids = _submit(engine, {"group": [{"type": "t.gate"}, {"chain": [{"type": "t.a"}, {"type": "t.b"}]}]})
        _advance(engine, wid, 0, ids[0], "DEAD_LETTERED", "ValueError: boom")
        engine.workflows.cancel(wid, ACTOR)
        _end_all(engine, wid, ids, "CANCELLED")
    assert engine.workflows.get(wid)["status"] != "RUNNING"
    assert all(0 < ttl <= keep for ttl in _ttls(engine, wid).values()), _ttls(engine, wid)


# -- a step whose queue was deleted while it waited -----------------------------------------------------------

def _drive(config: Any, run: Callable[[WorkflowDriver], Awaitable[Any]]) -> Any:
    async def go() -> Any:
        store = worker_store(config)
        try:
            return await run(WorkflowDriver(store))
        finally:
            await store.aclose()
    return asyncio.run(go())


def test_a_step_whose_queue_was_deleted_while_it_waited_is_created_in_the_queue_registered_again(
        engine: Engine) -> None:
    wid, ids = _submit(engine, {"chain": [{"type": "t.a", "queue": "wq1"}, {"type": "t.b", "queue": "wq2"}]})
    engine.queues.delete("wq2", ACTOR)  # empty: its step is not created yet
    assert "wq2" not in engine.queues.names()
    ready = ready_of(wid, _advance(engine, wid, 0, ids[0]))[1]
    # createSteps alone refuses it: the partition holds the delete's tombstone.
    (name, keys, args), = create_calls(engine.keys, engine.config, ready, engine.clock.now_ms(), 0)
    assert engine.scripts(name, keys=keys, args=args) == ["closed"]
    _drive(engine.config, lambda driver: driver.create(ready, engine.clock.now_ms()))
    assert "wq2" in engine.queues.names()
    task = engine.tasks.get(ids[1])  # under the id it was given, in the queue's new life
    assert task["status"] == "QUEUED" and task["queue"] == "wq2" and task["workflow_step"] == 1
    assert engine.client.hget(engine.keys.workflow_part(wid, "state"), "1") == "S"


def test_a_queue_holding_an_ended_step_not_yet_advanced_is_not_deleted(engine: Engine) -> None:
    wid, ids = _submit(engine, {"chain": [{"type": "t.a", "queue": "wq2"}, {"type": "t.b", "queue": "wq3"}]})
    engine.tasks.cancel(ids[0], ACTOR)  # ends step 0: its outbox entry waits in wq2's partition
    tag = tag_of(ids[0])
    assert engine.client.hexists(engine.keys.wf_outbox(tag), ids[0])
    # The leader re-drives only the partitions of live queues: deleted now, the workflow would
    # stay RUNNING for good.
    with pytest.raises(QueueNotEmpty) as refused:
        engine.queues.delete("wq2", ACTOR)
    assert "in flight" in refused.value.message
    assert _drive(engine.config, lambda driver: driver.drive({tag: [ids[0]]})) == 1
    assert engine.workflows.get(wid)["status"] != "RUNNING"
    engine.queues.delete("wq2", ACTOR)
    assert "wq2" not in engine.queues.names()


def test_a_first_step_whose_queue_is_deleted_during_the_submit_is_left_to_the_leader(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    import dtq_core.engine.workflows as module

    real = module.create_calls

    def delete_first(*args: Any, **kwargs: Any) -> Any:
        engine.queues.delete("wq2", ACTOR)  # between placing the steps and creating them
        return real(*args, **kwargs)

    monkeypatch.setattr(module, "create_calls", delete_first)
    wid, ids = _submit(engine, {"group": [{"type": "t.a", "queue": "wq1"}, {"type": "t.b", "queue": "wq2"}]})
    monkeypatch.undo()
    assert _states(engine, wid) == ["QUEUED", "WAITING"]  # never recorded as created
    tag = tag_of(ids[0])
    assert engine.client.hexists(engine.keys.wf_outbox(tag), f"wf:{wid}")  # the start, for the leader
    assert _drive(engine.config, lambda driver: driver.drive({tag: [f"wf:{wid}"]})) == 1
    assert _states(engine, wid) == ["QUEUED", "QUEUED"]
    assert engine.tasks.get(ids[1])["queue"] == "wq2"


def test_a_submit_that_dies_before_listing_its_workflow_is_listed_by_the_re_drive(
        engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    def connection_lost(*args: Any, **kwargs: Any) -> Any:
        raise redis.ConnectionError("Connection closed by server.")

    monkeypatch.setattr(engine.client, "zadd", connection_lost)  # right after createWorkflow
    with pytest.raises(redis.ConnectionError):
        engine.workflows.submit({"chain": [{"type": "t.a"}, {"type": "t.b"}]})
    monkeypatch.undo()
    assert engine.workflows.list()[0] == []  # created, not listed, its first step not made
    [(field, raw)] = [(f, r) for tag in engine.registry.get("default", fresh=True).tags
                      for f, r in engine.client.hgetall(engine.keys.wf_outbox(tag)).items()]
    wid = json.loads(raw)["w"]
    assert field == f"wf:{wid}" and _states(engine, wid) == ["WAITING", "WAITING"]
    assert _drive(engine.config, lambda driver: driver.drive({workflow_tag(wid): [field]})) == 1
    [listed], _ = engine.workflows.list()
    assert listed["id"] == wid and listed["created_at"] == engine.workflows.get(wid)["created_at"]
    assert _states(engine, wid) == ["QUEUED", "WAITING"]


def test_a_step_whose_deleted_queue_cannot_be_registered_again_fails_its_workflow(engine: Engine) -> None:
    wid, ids = _submit(engine, {"chain": [{"type": "t.a", "queue": "wq1"}, {"type": "t.b", "queue": "wq2"}]})
    engine.queues.delete("wq2", ACTOR)
    full = dataclasses.replace(engine.config, max_queues=len(engine.queues.names()))
    ready = ready_of(wid, _advance(engine, wid, 0, ids[0]))[1]
    _drive(full, lambda driver: driver.create(ready, engine.clock.now_ms()))
    wf = engine.workflows.get(wid)
    assert wf["status"] == "FAILED" and [s["status"] for s in wf["steps"]] == ["QUEUED", "FAILED"]
    reason = engine.client.hget(engine.keys.workflow_part(wid, "reason"), "1")
    assert "QueueDeleted: queue 'wq2' was deleted" in reason and "DTQ_MAX_QUEUES" in reason
    assert "wq2" not in engine.queues.names()


# -- the queue bound, checked for the whole tree before anything is placed ------------------------------------

def test_a_workflow_over_more_new_queues_than_the_bound_allows_registers_none(config: Any) -> None:
    engine = Engine(dataclasses.replace(config, max_queues=3))
    engine.tasks.enqueue("t.a", {}, queue="default")
    with pytest.raises(QueueLimitReached) as caught:
        engine.workflows.submit({"chain": [{"type": "t.a", "queue": "default"},
                                           *[{"type": "t.a", "queue": f"lim{i}"} for i in range(6)]]})
    assert caught.value.field == "chain[3].queue"  # default, lim0 and lim1 fit; lim2 does not
    assert "lim2" in caught.value.message and "DTQ_MAX_QUEUES" in caught.value.message
    assert engine.queues.names() == ["default"]
    assert engine.workflows.list() == ([], None)
    # Within the bound, it goes through.
    engine.workflows.submit({"chain": [{"type": "t.a", "queue": f"lim{i}"} for i in range(2)]})
