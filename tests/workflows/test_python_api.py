"""dtq_tasks.step / chain / group build the JSON tree the API takes; .enqueue() submits it; the
workflow's aggregate progress reads its steps' records."""

from __future__ import annotations

from typing import Any

import pytest

import dtq_tasks
from dtq_core.engine import Engine


@dtq_tasks.task("wfapi.render")
def render(payload: Any) -> None:
    return None


def test_the_builders_write_the_tree_as_the_api_takes_it() -> None:
    wf = dtq_tasks.chain(
        dtq_tasks.step("report.fetch", {"day": 1}, max_attempts=2),
        dtq_tasks.group([dtq_tasks.step(render, {"page": n}, queue="pages") for n in range(2)],
                        then=dtq_tasks.step("report.publish", priority="high"), tolerate_failures=True),
        render,  # a @task function alone: a step without payload
    )
    assert wf.to_dict() == {"chain": [
        {"type": "report.fetch", "payload": {"day": 1}, "queue": "default", "priority": "normal", "max_attempts": 2},
        {"group": [{"type": "wfapi.render", "payload": {"page": 0}, "queue": "pages", "priority": "normal"},
                   {"type": "wfapi.render", "payload": {"page": 1}, "queue": "pages", "priority": "normal"}],
         "then": {"type": "report.publish", "payload": None, "queue": "default", "priority": "high"},
         "tolerate_failures": True},
        {"type": "wfapi.render", "payload": None, "queue": "default", "priority": "normal"},
    ]}


def test_a_step_needs_a_type_or_a_task_function() -> None:
    with pytest.raises(TypeError):
        dtq_tasks.step(lambda p: p)
    with pytest.raises(TypeError):
        dtq_tasks.chain("not a step")  # type: ignore[arg-type]


def test_enqueue_returns_the_workflow_id_and_the_steps_show_it(live_engine: Engine) -> None:
    wid = dtq_tasks.chain(dtq_tasks.step(render, {"page": 1}), dtq_tasks.step("report.publish")).enqueue(
        request_id="req-1")
    wf = live_engine.workflows.get(wid)
    first = live_engine.tasks.get(wf["steps"][0]["task_id"])
    assert (first["workflow_id"], first["workflow_step"], first["request_id"]) == (wid, 0, "req-1")
    assert wf["steps"][1]["status"] == "WAITING"


def test_the_aggregate_progress_counts_finished_steps_whole_and_running_ones_by_their_progress(
        engine: Engine) -> None:
    wid = engine.workflows.submit({"group": [{"type": "t.a"}, {"type": "t.b"}, {"type": "t.c"}, {"type": "t.d"}]})
    ids = [s["task_id"] for s in engine.workflows.get(wid)["steps"]]
    # What the progress helper's script writes on a running task (fields read here, missing = 0).
    engine.client.hset(engine.keys.task(ids[0]), mapping={"status": "RUNNING", "progress_done": 5,
                                                          "progress_total": 10})
    engine.client.hset(engine.keys.task(ids[1]), mapping={"status": "SUCCEEDED"})
    engine.client.hset(engine.keys.task(ids[2]), mapping={"status": "RUNNING"})
    wf = engine.workflows.get(wid)
    assert wf["progress"] == {"done": 1.5, "total": 4.0, "fraction": 0.375}
    assert wf["steps"][0]["progress"] == {"done": 5.0, "total": 10.0}
    assert wf["steps"][2]["progress"] is None


def test_a_read_bounded_to_the_first_steps_resolves_those_and_counts_the_rest_by_their_state(
        engine: Engine) -> None:
    wid = engine.workflows.submit({"chain": [{"group": [{"type": "t.a"} for _ in range(3)]},
                                             {"group": [{"type": "t.b"} for _ in range(3)]}]})
    engine.client.hset(engine.keys.workflow_part(wid, "state"), "5", "D")  # the last step, finished
    whole = engine.workflows.get(wid)
    assert [s["depends_on"] for s in whole["steps"]] == [[], [], [], [0, 1, 2], [0, 1, 2], [0, 1, 2]]
    first = engine.workflows.get(wid, steps_limit=4)
    assert first["steps"] == whole["steps"][:4] and first["steps_total"] == 6
    assert first["progress"] == whole["progress"] == {"done": 1.0, "total": 6.0, "fraction": 0.1667}
    assert engine.workflows.get(wid, steps_limit=0)["steps"] == []


def test_the_task_api_shows_the_workflow_of_a_step(live_engine: Engine, client: Any) -> None:
    wid = dtq_tasks.chain(dtq_tasks.step("report.fetch"), dtq_tasks.step("report.publish")).enqueue()
    first = live_engine.workflows.get(wid)["steps"][0]["task_id"]
    body = client.get(f"/api/v1/tasks/{first}").json()
    assert (body["workflow_id"], body["workflow_step"]) == (wid, 0)
    assert client.get(f"/api/v1/tasks/{wid}").status_code == 404  # a workflow id is not a task id
