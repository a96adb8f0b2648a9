"""A worker killed at the two moments of a workflow's advance (DTQ_TEST_FAULT stops a real
runworker_dtq right there, the test SIGKILLs it): after the step's completion was written but
before the advance, and after the advance created the next step but before its outbox entry was
deleted. The leader's re-drive finishes the job; no step runs twice, none is lost."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from ..failure.support import stopped
from .support import env, execs, log

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("point", ["after_complete", "before_outbox_settle"])
def test_a_worker_killed_around_an_advance_leaves_the_workflow_to_finish_once(
        point: str, engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    a = start_worker("--name", "a", "--queues", "wfc", **env(DTQ_TEST_FAULT=point))
    wid = engine.workflows.submit({"chain": [{"type": "wf.inc", "payload": {"n": n}, "queue": "wfc"}
                                             for n in (1, 2, 3)]})
    wait_for(lambda: stopped(a.pid), timeout=30, message=a.output)
    wf = engine.workflows.get(wid)
    first = wf["steps"][0]["task_id"]
    assert engine.tasks.get(first)["status"] == "SUCCEEDED"
    outbox = engine.keys.wf_outbox(first.split("-")[0])
    assert redis_client.hexists(outbox, first)  # the end is in the outbox, not yet settled
    # after_complete: nothing advanced yet; before_outbox_settle: the next step was created (and
    # the stopped worker's fetch may have claimed it meanwhile).
    second = wf["steps"][1]["status"]
    assert second == "WAITING" if point == "after_complete" else second in ("QUEUED", "RUNNING")
    a.kill()
    b = start_worker("--name", "b", "--queues", "wfc", **env())
    wait_for(lambda: engine.workflows.get(wid)["status"] == "SUCCEEDED", timeout=40, message=b.output)
    wf = engine.workflows.get(wid)
    runs = [execs(redis_client, engine.keys, s["task_id"]) for s in wf["steps"]]
    # Created once each; the second ran twice only if the killed worker had started it (at-least-once).
    assert runs[0] == runs[2] == 1 and runs[1] in ((1, 2) if second == "RUNNING" else (1,))
    assert engine.tasks.get(wf["steps"][2]["task_id"])["result"] == 6
    assert sorted({r["parent"] or 0 for r in log(redis_client, engine.keys, "inc")}) == [0, 1, 3]
    wait_for(lambda: redis_client.hlen(outbox) == 0, timeout=15, message=b.output)
    if point == "after_complete":
        assert "re-drove" in b.output()  # the leader found the entry the dead worker left


def test_a_submit_cut_off_after_opening_its_workflow_is_started_by_the_leader(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The submitting process dies right after the script that opened the workflow (and wrote its
    # start into the outbox, in the same script), before creating any step.
    import dtq_core.engine.workflows as module

    def cut_off(*args: object, **kwargs: object) -> None:
        raise RuntimeError("the submitting process died here")

    monkeypatch.setattr(module, "advance_call", cut_off)
    with pytest.raises(RuntimeError):
        engine.workflows.submit({"chain": [{"type": "wf.inc", "payload": {"n": n}, "queue": "wfs"} for n in (1, 2)]})
    monkeypatch.undo()
    ((row,), _) = engine.workflows.list()
    wid = row["id"]
    assert [s["status"] for s in engine.workflows.get(wid)["steps"]] == ["WAITING", "WAITING"]
    worker = start_worker("--name", "a", "--queues", "wfs", **env())
    wait_for(lambda: engine.workflows.get(wid)["status"] == "SUCCEEDED", timeout=40, message=worker.output)
    wf = engine.workflows.get(wid)
    assert [execs(redis_client, engine.keys, s["task_id"]) for s in wf["steps"]] == [1, 1]
    assert engine.tasks.get(wf["steps"][1]["task_id"])["result"] == 3
    assert "re-drove" in worker.output()
