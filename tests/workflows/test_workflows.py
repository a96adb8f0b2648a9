"""Workflows run by real worker processes on a real redis-server (issue 23): results flow along a
chain, a group's callback sums its members, a failure dead-letters and cancels what depends on
it, a DLQ retry resumes, a cancel stops a running workflow."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

import dtq_tasks
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq_selection import DlqSelection

from ..conftest import WorkerProcess, wait_for
from .support import env, execs, flag, log, outbox_empty, ttls

pytestmark = pytest.mark.slow

ACTOR = Actor(name="user:test", source="cli")


def _status(engine: Engine, wid: str) -> str:
    return str(engine.workflows.get(wid)["status"])


def _steps(engine: Engine, wid: str) -> list[str]:
    return [s["status"] for s in engine.workflows.get(wid)["steps"]]


def test_a_chain_of_five_passes_each_result_to_the_next(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "a", "--queues", "wf", **env())
    wid = engine.workflows.submit(dtq_tasks.chain(*[dtq_tasks.step("wf.inc", {"n": n}, queue="wf")
                                                    for n in (1, 2, 3, 4, 5)]).to_dict())
    wait_for(lambda: _status(engine, wid) == "SUCCEEDED", timeout=30, message=worker.output)
    wf = engine.workflows.get(wid)
    assert wf["steps_total"] == wf["steps_finished"] == 5
    assert [s["status"] for s in wf["steps"]] == ["SUCCEEDED"] * 5
    assert [s["depends_on"] for s in wf["steps"]] == [[], [0], [1], [2], [3]]
    assert wf["finished_at"] is not None and wf["progress"]["fraction"] == 1.0
    # Each step received its predecessor's result: 1, 1+2, 1+2+3, ...
    runs = sorted(log(redis_client, engine.keys, "inc"), key=lambda r: r["step"])
    assert [r["parent"] for r in runs] == [None, 1, 3, 6, 10]
    assert {r["workflow_id"] for r in runs} == {wid}
    last = engine.tasks.get(wf["steps"][4]["task_id"])
    assert last["result"] == 15 and last["workflow_id"] == wid and last["workflow_step"] == 4
    assert all(execs(redis_client, engine.keys, s["task_id"]) == 1 for s in wf["steps"])
    # The finished workflow's keys expire with the task retention; nothing is left to advance.
    for key in (engine.keys.workflow(wid), engine.keys.workflow_part(wid, "def")):
        assert 0 < redis_client.pttl(key) <= engine.config.task_retention_s * 1000
    tags = {s["task_id"].split("-")[0] for s in wf["steps"]}
    # The outbox entry is settled by the worker's call after the advance that finished it.
    wait_for(lambda: all(redis_client.hlen(engine.keys.wf_outbox(tag)) == 0 for tag in tags), timeout=10,
             message="the workflow's outbox entries were never settled")


def test_a_failing_middle_step_cancels_its_successors_and_a_dlq_retry_resumes(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "a", "--queues", "wf", **env())
    wid = engine.workflows.submit({"chain": [
        {"type": "wf.inc", "payload": {"n": 1}, "queue": "wf"},
        {"type": "wf.gate", "payload": {"n": 10}, "queue": "wf", "max_attempts": 1},
        {"type": "wf.inc", "payload": {"n": 100}, "queue": "wf"},
        {"type": "wf.inc", "payload": {"n": 1000}, "queue": "wf"},
    ]})
    wait_for(lambda: _status(engine, wid) == "FAILED", timeout=30, message=worker.output)
    wf = engine.workflows.get(wid)
    assert [s["status"] for s in wf["steps"]] == ["SUCCEEDED", "DEAD_LETTERED", "CANCELLED", "CANCELLED"]
    gate_task = wf["steps"][1]["task_id"]
    for step in wf["steps"][2:]:
        assert f"step 1 (task {gate_task}) ended DEAD_LETTERED" in step["cancel_reason"]
    assert wf["finished_at"] is not None
    # Retrying the dead letter resumes the workflow where it stopped.
    flag(redis_client, engine.keys, "open")
    dead = engine.tasks.get(gate_task)
    assert engine.dlq.retry(DlqSelection(ids=(dead["dlq_entry_id"],)), Actor(name="user:test", source="cli")) == 1
    wait_for(lambda: _status(engine, wid) == "SUCCEEDED", timeout=30, message=worker.output)
    wf = engine.workflows.get(wid)
    assert [s["status"] for s in wf["steps"]] == ["SUCCEEDED"] * 4
    assert all(s["cancel_reason"] is None for s in wf["steps"])
    assert engine.tasks.get(wf["steps"][3]["task_id"])["result"] == 1111
    assert wf["finished_at"] is not None


def test_cancelling_a_running_workflow_stops_its_steps(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "a", "--queues", "wf", **env())
    wid = engine.workflows.submit({"chain": [
        {"type": "wf.inc", "queue": "wf"},
        {"group": [{"type": "wf.slow", "payload": {"seconds": 60}, "queue": "wf"} for _ in range(2)],
         "then": {"type": "wf.inc", "queue": "wf"}},
    ]})
    wait_for(lambda: len(log(redis_client, engine.keys, "slow")) == 2, timeout=30, message=worker.output)
    wf = engine.workflows.cancel(wid, Actor(name="user:test", source="cli"))
    assert wf["status"] == "CANCELLED"
    wait_for(lambda: [s["status"] for s in engine.workflows.get(wid)["steps"]]
             == ["SUCCEEDED", "CANCELLED", "CANCELLED", "CANCELLED"], timeout=20, message=worker.output)
    wf = engine.workflows.get(wid)
    assert wf["steps"][3]["cancel_reason"] == "workflow cancelled"
    assert execs(redis_client, engine.keys, wf["steps"][3]["task_id"]) == 0  # the callback never ran
    (entry,) = engine.audit.list(action="workflow.cancel").items
    assert entry["target"] == f"workflow:{wid}" and entry["actor"] == "user:test"


def test_steps_on_queues_in_other_slots_advance_across_them(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # Each queue's partition has a tag (a hash slot of its own on a cluster); the workflow's keys are
    # in the first step's. A chain into a group across three queues, then a callback on a fourth.
    worker = start_worker("--name", "a", "--queues", "wfa,wfb,wfc,wfd", **env())
    first = dtq_tasks.step("wf.inc", {"n": 2}, queue="wfa")
    members = [dtq_tasks.step("wf.inc", {"n": n}, queue=q) for n, q in ((10, "wfb"), (20, "wfc"), (30, "wfb"))]
    wid = dtq_tasks.chain(first, dtq_tasks.group(members, then=dtq_tasks.step("wf.sum", queue="wfd"))).enqueue()
    wait_for(lambda: _status(engine, wid) == "SUCCEEDED", timeout=30, message=worker.output)
    wf = engine.workflows.get(wid)
    assert len({s["task_id"].split("-")[0] for s in wf["steps"]}) == 4  # four partitions
    assert wid.split("-")[0] == wf["steps"][0]["task_id"].split("-")[0]
    (summed,) = log(redis_client, engine.keys, "sum")
    assert summed["parent"] == [12, 22, 32]
    assert engine.tasks.get(wf["steps"][4]["task_id"])["result"] == 66


def test_a_group_that_tolerates_failures_calls_back_with_the_error_in_place(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "a", "--queues", "wf", **env())
    wid = dtq_tasks.group([dtq_tasks.step("wf.inc", {"n": 1}, queue="wf"),
                           dtq_tasks.step("wf.gate", queue="wf", max_attempts=1)],
                          then=dtq_tasks.step("wf.echo_parent", queue="wf"), tolerate_failures=True).enqueue()
    wait_for(lambda: _status(engine, wid) == "SUCCEEDED", timeout=30, message=worker.output)
    wf = engine.workflows.get(wid)
    assert [s["status"] for s in wf["steps"]] == ["SUCCEEDED", "DEAD_LETTERED", "SUCCEEDED"]
    (echoed,) = log(redis_client, engine.keys, "echo")
    assert echoed["parent"] == [1, {"error": {"class": "ValueError", "message": "the gate is closed",
                                              "status": "DEAD_LETTERED"}}]


def test_cancelling_a_wide_group_cancels_its_queued_steps_and_the_leader_settles_their_ends(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "a", "--queues", "wfw", "--concurrency", "2", **env())
    wid = engine.workflows.submit({"group": [{"type": "wf.slow", "payload": {"seconds": 60}, "queue": "wfw"}
                                             for _ in range(30)], "then": {"type": "wf.inc", "queue": "wfw"}})
    wait_for(lambda: len(log(redis_client, engine.keys, "slow")) == 2, timeout=30, message=worker.output)
    engine.workflows.cancel(wid, Actor(name="user:test", source="cli"))
    wait_for(lambda: {s["status"] for s in engine.workflows.get(wid)["steps"]} == {"CANCELLED"}, timeout=20,
             message=worker.output)
    # The queued steps were cancelled by the task cancel, which no worker reports: their outbox
    # entries are the leader's to settle.
    outbox = engine.keys.wf_outbox(engine.workflows.get(wid)["steps"][0]["task_id"].split("-")[0])
    wait_for(lambda: redis_client.hlen(outbox) == 0, timeout=20, message=worker.output)
    assert len(log(redis_client, engine.keys, "slow")) == 2  # no queued step started after the cancel
    state = redis_client.hgetall(engine.keys.workflow_part(wid, "state"))
    assert set(state.values()) == {"C"}


def test_every_key_of_a_cancelled_workflow_expires(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # Its two members run when it is cancelled; their ends (written after the cancel) reach the
    # workflow, and every part they write expires with the rest.
    worker = start_worker("--name", "a", "--queues", "wfk", "--concurrency", "4", **env())
    wid = engine.workflows.submit({"group": [{"type": "wf.slow", "payload": {"seconds": 60}, "queue": "wfk"}
                                             for _ in range(2)]})
    wait_for(lambda: len(log(redis_client, engine.keys, "slow")) == 2, timeout=30, message=worker.output)
    engine.workflows.cancel(wid, ACTOR)
    wait_for(lambda: _steps(engine, wid) == ["CANCELLED"] * 2, timeout=20, message=worker.output)
    wait_for(lambda: outbox_empty(redis_client, engine.keys, engine.workflows.get(wid)["steps"]), timeout=20,
             message=worker.output)
    forever = {k: t for k, t in ttls(redis_client, engine.keys, wid).items() if t < 0}
    assert not forever, f"keys of a CANCELLED workflow that never expire: {forever}"


def test_every_key_of_a_failed_workflow_expires_once_its_other_branch_ends(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # One member dead-letters at once (FAILED), the other runs on and succeeds. Its keys have no
    # TTL while that member runs (it must find its workflow however long it takes), and all of
    # them have one once it ended.
    worker = start_worker("--name", "a", "--queues", "wfl", "--concurrency", "4", **env())
    wid = engine.workflows.submit({"group": [
        {"type": "wf.gate", "queue": "wfl", "max_attempts": 1},
        {"type": "wf.slow", "payload": {"seconds": 3}, "queue": "wfl"}]})
    wait_for(lambda: _status(engine, wid) == "FAILED", timeout=30, message=worker.output)
    running = ttls(redis_client, engine.keys, wid)
    if _steps(engine, wid)[1] == "RUNNING":  # still, after the read: it was read while the member ran
        assert set(running.values()) == {-1}, running
    wait_for(lambda: _steps(engine, wid) == ["DEAD_LETTERED", "SUCCEEDED"], timeout=30, message=worker.output)
    wait_for(lambda: outbox_empty(redis_client, engine.keys, engine.workflows.get(wid)["steps"]), timeout=20,
             message=worker.output)
    keep = engine.config.task_retention_s * 1000
    assert all(0 < t <= keep for t in ttls(redis_client, engine.keys, wid).values()), \
        ttls(redis_client, engine.keys, wid)


def test_a_step_whose_queue_was_deleted_while_it_waited_runs_in_the_queue_created_again(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # chain[slow on wfq1, inc on wfq2]: wfq2 is empty while its step waits, so an operator may
    # delete it. When the step becomes ready, wfq2 is registered again (as a DLQ retry of a deleted
    # queue's dead letters does) and the step runs there, under its id; the workflow succeeds.
    worker = start_worker("--name", "a", "--queues", "wfq1,wfq2", **env())
    wid = engine.workflows.submit({"chain": [
        {"type": "wf.slow", "payload": {"seconds": 2}, "queue": "wfq1"},
        {"type": "wf.inc", "payload": {"n": 1}, "queue": "wfq2"}]})
    wait_for(lambda: len(log(redis_client, engine.keys, "slow")) == 1, timeout=30, message=worker.output)
    engine.queues.delete("wfq2", ACTOR)
    assert "wfq2" not in engine.queues.names()
    wait_for(lambda: _status(engine, wid) != "RUNNING", timeout=40, message=worker.output)
    wf = engine.workflows.get(wid)
    assert wf["status"] == "SUCCEEDED", wf
    assert [r["step"] for r in log(redis_client, engine.keys, "inc")] == [1]
    assert "wfq2" in engine.queues.names()
    assert engine.tasks.get(wf["steps"][1]["task_id"])["queue"] == "wfq2"


def test_a_failure_inside_a_tolerant_groups_chain_member_ends_that_member(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # group(tolerate)[inc, chain[gate, inc]] then echo: the gate dead-letters, which ends its member
    # (the inc after it never runs on an error object as if it were the gate's output), and the
    # callback finds the gate's error in that member's place.
    worker = start_worker("--name", "a", "--queues", "wft", **env())
    wid = engine.workflows.submit({
        "group": [{"type": "wf.inc", "payload": {"n": 1}, "queue": "wft"},
                  {"chain": [{"type": "wf.gate", "queue": "wft", "max_attempts": 1},
                             {"type": "wf.inc", "payload": {"n": 5}, "queue": "wft", "max_attempts": 1}]}],
        "then": {"type": "wf.echo_parent", "queue": "wft"},
        "tolerate_failures": True})
    wait_for(lambda: _status(engine, wid) != "RUNNING", timeout=30, message=worker.output)
    wf = engine.workflows.get(wid)
    assert wf["status"] == "SUCCEEDED"
    assert [s["status"] for s in wf["steps"]] == ["SUCCEEDED", "DEAD_LETTERED", "CANCELLED", "SUCCEEDED"]
    assert "its group tolerates failures" in wf["steps"][2]["cancel_reason"]
    assert [r["step"] for r in log(redis_client, engine.keys, "inc")] == [0]
    (echoed,) = log(redis_client, engine.keys, "echo")
    assert echoed["parent"] == [1, {"error": {"class": "ValueError", "message": "the gate is closed",
                                              "status": "DEAD_LETTERED"}}]


def test_a_failed_workflow_whose_other_branch_still_runs_can_be_cancelled(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # A failed step makes the workflow FAILED while the branches that do not depend on it run on.
    # Cancelling it stops them: the running step is cancelled, the ones after it never start; it
    # stays FAILED, and a DLQ retry of the failed step that succeeds does not resume it.
    worker = start_worker("--name", "a", "--queues", "wfc2", "--concurrency", "4", **env())
    wid = engine.workflows.submit({"group": [
        {"type": "wf.gate", "queue": "wfc2", "max_attempts": 1},
        {"chain": [{"type": "wf.slow", "payload": {"seconds": 30}, "queue": "wfc2"},
                   {"type": "wf.inc", "payload": {"n": 1}, "queue": "wfc2"},
                   {"type": "wf.inc", "payload": {"n": 1}, "queue": "wfc2"}]}]})
    wait_for(lambda: _status(engine, wid) == "FAILED" and _steps(engine, wid)[1] == "RUNNING", timeout=30,
             message=worker.output)
    wf = engine.workflows.cancel(wid, ACTOR)
    assert wf["status"] == "FAILED" and [s["status"] for s in wf["steps"][2:]] == ["CANCELLED"] * 2
    wait_for(lambda: _steps(engine, wid)[1] == "CANCELLED", timeout=20, message=worker.output)
    flag(redis_client, engine.keys, "open")
    dead = engine.tasks.get(wf["steps"][0]["task_id"])
    assert engine.dlq.retry(DlqSelection(ids=(dead["dlq_entry_id"],)), ACTOR) == 1
    wait_for(lambda: _steps(engine, wid)[0] == "SUCCEEDED", timeout=30, message=worker.output)
    wait_for(lambda: outbox_empty(redis_client, engine.keys, engine.workflows.get(wid)["steps"]), timeout=20,
             message=worker.output)
    wf = engine.workflows.get(wid)
    assert wf["status"] == "FAILED" and [s["status"] for s in wf["steps"]] == [
        "SUCCEEDED", "CANCELLED", "CANCELLED", "CANCELLED"]
    assert log(redis_client, engine.keys, "inc") == []  # nothing after the cancel started
