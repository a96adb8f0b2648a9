"""POST/GET /api/v1/workflows, GET /api/v1/workflows/<id>, POST .../cancel (issue 23): the tree as
JSON, validation naming the step's path, oversized bodies, unknown ids, a cancel audited and
refused once finished, permissions, and 503 with Redis down."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..conftest import next_millisecond
from ..redis_server import RedisServer
from .support import assert_error, audit_entries, drain

CHAIN = {"chain": [{"type": "dtq.echo", "payload": {"n": 1}, "queue": "wf"},
                   {"group": [{"type": "dtq.echo", "payload": {"n": i}, "queue": "wf-b"} for i in range(3)],
                    "then": {"type": "dtq.echo", "queue": "wf"}},
                   {"type": "dtq.echo", "priority": "high", "queue": "wf"}]}


def submit(api: APIClient, body: Any, **headers: Any) -> Any:
    return api.post("/api/v1/workflows", json.dumps(body), content_type="application/json", **headers)


def test_a_nested_workflow_is_created_with_its_first_step_queued(api: APIClient, live_engine: Engine) -> None:
    response = submit(api, CHAIN, HTTP_X_REQUEST_ID="wf-req-1")
    assert response.status_code == 201, response.content
    wf = response.json()
    assert wf["status"] == "RUNNING" and wf["steps_total"] == 6 and wf["steps_finished"] == 0
    assert wf["root"]["kind"] == "chain" and wf["root"]["children"][1]["kind"] == "group"
    steps = wf["steps"]
    assert [s["type"] for s in steps] == ["dtq.echo"] * 6
    assert steps[0]["status"] == "QUEUED" and {s["status"] for s in steps[1:]} == {"WAITING"}
    assert steps[1]["depends_on"] == [0] and steps[4]["depends_on"] == [1, 2, 3] and steps[5]["depends_on"] == [4]
    assert steps[5]["priority"] == "high" and steps[1]["queue"] == "wf-b"
    task = api.get(f"/api/v1/tasks/{steps[0]['task_id']}").json()
    assert task["workflow_id"] == wf["id"] and task["workflow_step"] == 0 and task["request_id"] == "wf-req-1"
    assert api.get(f"/api/v1/workflows/{wf['id']}").json()["steps"] == steps


def test_a_group_with_a_callback(api: APIClient, live_engine: Engine) -> None:
    body = {"group": [{"type": "dtq.echo", "payload": i} for i in range(4)], "then": {"type": "dtq.echo"},
            "tolerate_failures": True}
    wf = submit(api, body).json()
    assert wf["root"]["tolerate_failures"] is True
    assert [s["status"] for s in wf["steps"]] == ["QUEUED"] * 4 + ["WAITING"]


def test_the_list_is_newest_first_filtered_and_paged(api: APIClient, live_engine: Engine) -> None:
    ids = []
    for _ in range(3):
        next_millisecond(live_engine)  # each a later creation time: same-ms workflows are listed by id
        ids.append(submit(api, {"chain": [{"type": "dtq.echo"}]}).json()["id"])
    assert [w["id"] for w in api.get("/api/v1/workflows").json()["results"]] == ids[::-1]
    first = api.get("/api/v1/workflows", {"limit": 2}).json()
    assert [w["id"] for w in first["results"]] == ids[:0:-1] and first["next"]
    rest = api.get(first["next"]).json()
    assert [w["id"] for w in rest["results"]] == ids[:1] and rest["next"] is None
    api.post(f"/api/v1/workflows/{ids[1]}/cancel")
    assert [w["id"] for w in api.get("/api/v1/workflows", {"status": "CANCELLED"}).json()["results"]] == [ids[1]]
    assert set(api.get("/api/v1/workflows").json()["results"][0]) == {
        "id", "status", "created_at", "finished_at", "steps_total", "steps_finished"}


@pytest.mark.parametrize("body,field", [
    ({}, "type"), ([], "body"), ({"chain": []}, "chain"), ({"chain": "x"}, "chain"),
    ({"chain": [{"type": "bad type!"}]}, "chain[0].type"),
    ({"chain": [{"type": "dtq.echo"}, {"type": "dtq.echo", "queue": "Bad Queue"}]}, "chain[1].queue"),
    ({"group": [{"type": "dtq.echo"}], "then": {"type": "dtq.echo", "priority": "urgent"}}, "then.priority"),
    ({"chain": [{"group": [{"type": "dtq.echo", "max_attempts": 0}]}]}, "chain[0].group[0].max_attempts"),
    ({"chain": [{"type": "dtq.echo"}], "group": [{"type": "dtq.echo"}]}, None),
])
def test_malformed_trees_are_400_naming_the_step_and_create_nothing(
        api: APIClient, live_engine: Engine, body: Any, field: str | None) -> None:
    error = assert_error(submit(api, body), 400, "VALIDATION_ERROR")
    if field is not None:
        assert error.get("field") == field or field in error["message"], error
    assert api.get("/api/v1/workflows").json()["results"] == []


def test_a_body_that_is_not_json_is_400(api: APIClient) -> None:
    assert_error(api.post("/api/v1/workflows", "{nope", content_type="application/json"), 400, "MALFORMED_JSON")


def test_an_unknown_task_type_is_refused_once_workers_registered_theirs(api: APIClient, live_engine: Engine) -> None:
    live_engine.client.hset(live_engine.keys.task_types(), "dtq.echo", int(time.time() * 1000))  # as a worker does
    error = assert_error(submit(api, {"chain": [{"type": "dtq.echo"}, {"type": "nobody.serves"}]}), 400,
                         "UNKNOWN_TASK_TYPE")
    assert "chain[1]" in error["message"]


def test_oversized_input_is_refused(api: APIClient, live_engine: Engine, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "PAYLOAD_MAX_BYTES": 1000, "WORKFLOW_MAX_STEPS": 5}
    assert_error(submit(api, {"chain": [{"type": "dtq.echo", "payload": "x" * 2000}]}), 413, "PAYLOAD_TOO_LARGE")
    error = assert_error(submit(api, {"group": [{"type": "dtq.echo"}] * 6}), 400, "VALIDATION_ERROR")
    assert "DTQ_WORKFLOW_MAX_STEPS" in error["message"]
    huge = json.dumps({"chain": [{"type": "dtq.echo", "payload": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)}]})
    assert_error(api.post("/api/v1/workflows", huge, content_type="application/json"), 413, "PAYLOAD_TOO_LARGE")
    assert api.get("/api/v1/workflows").json()["results"] == []


def test_unknown_ids_are_404_and_bad_parameters_400(api: APIClient, live_engine: Engine) -> None:
    for path in ("/api/v1/workflows/nope", "/api/v1/workflows/" + "w" * 5000, "/api/v1/workflows/ab12-w" + "0" * 31):
        assert_error(api.get(path), 404, "WORKFLOW_NOT_FOUND")
    assert_error(api.post("/api/v1/workflows/nope/cancel"), 404, "WORKFLOW_NOT_FOUND")
    assert_error(api.get("/api/v1/workflows", {"status": "DONE"}), 400, "VALIDATION_ERROR")
    assert_error(api.get("/api/v1/workflows", {"limit": "0"}), 400, "VALIDATION_ERROR")
    assert_error(api.get("/api/v1/workflows", {"cursor": "garbage"}), 400, "VALIDATION_ERROR")
    assert_error(api.delete("/api/v1/workflows"), 405, "METHOD_NOT_ALLOWED")


def test_cancel_is_audited_and_a_finished_workflow_is_409(api: APIClient, live_engine: Engine) -> None:
    wf = submit(api, CHAIN).json()
    response = api.post(f"/api/v1/workflows/{wf['id']}/cancel", HTTP_X_REQUEST_ID="cancel-1")
    assert response.status_code == 202, response.content
    cancelled = response.json()
    assert cancelled["status"] == "CANCELLED" and cancelled["finished_at"]
    assert {s["status"] for s in cancelled["steps"]} == {"CANCELLED"}
    assert api.get(f"/api/v1/tasks/{wf['steps'][0]['task_id']}").json()["status"] == "CANCELLED"
    entry = next(e for e in live_engine.audit.list(limit=50).items if e["action"] == "workflow.cancel")
    assert entry["target"] == f"workflow:{wf['id']}" and entry["request_id"] == "cancel-1"
    error = assert_error(api.post(f"/api/v1/workflows/{wf['id']}/cancel"), 409, "WORKFLOW_FINISHED")
    assert "CANCELLED" in error["message"]


def run_to_the_end(api: APIClient, engine: Engine, wid: str) -> dict[str, Any]:
    """Real (in-process, burst) workers run the steps until the workflow leaves RUNNING."""
    deadline = time.monotonic() + 20
    while (wf := api.get(f"/api/v1/workflows/{wid}").json())["status"] == "RUNNING":
        assert time.monotonic() < deadline, wf
        drain(engine.config)
    return wf


def test_a_finished_workflow_reads_as_finished_and_cancel_is_409(api: APIClient, live_engine: Engine) -> None:
    body = {"chain": [{"type": "dtq.echo", "payload": 1}, {"group": [{"type": "dtq.echo", "payload": 2}] * 2},
                      {"type": "dtq.echo"}]}
    wf = run_to_the_end(api, live_engine, submit(api, body).json()["id"])
    assert wf["status"] == "SUCCEEDED" and wf["finished_at"] and wf["steps_finished"] == wf["steps_total"] == 4
    assert {s["status"] for s in wf["steps"]} == {"SUCCEEDED"} and wf["progress"]["fraction"] == 1
    error = assert_error(api.post(f"/api/v1/workflows/{wf['id']}/cancel"), 409, "WORKFLOW_FINISHED")
    assert "SUCCEEDED" in error["message"]
    assert api.get(f"/api/v1/workflows/{wf['id']}").json()["status"] == "SUCCEEDED"
    assert [w["id"] for w in api.get("/api/v1/workflows", {"status": "SUCCEEDED"}).json()["results"]] == [wf["id"]]
    assert not [e for e in audit_entries(live_engine) if e["action"] == "workflow.cancel"]


def test_a_failed_step_fails_the_workflow_and_cancels_what_follows(api: APIClient, live_engine: Engine) -> None:
    body = {"chain": [{"type": "dtq.fail", "payload": {"message": "boom"}, "max_attempts": 1},
                      {"type": "dtq.echo"}]}
    wf = run_to_the_end(api, live_engine, submit(api, body).json()["id"])
    assert wf["status"] == "FAILED" and wf["finished_at"]
    first, second = wf["steps"]
    assert first["status"] == "DEAD_LETTERED" and second["status"] == "CANCELLED" and second["cancel_reason"]
    assert api.get(f"/api/v1/tasks/{first['task_id']}").json()["workflow_id"] == wf["id"]
    assert wf["cancellable"] is False
    assert "FAILED" in assert_error(api.post(f"/api/v1/workflows/{wf['id']}/cancel"), 409,
                                    "WORKFLOW_FINISHED")["message"]


def test_a_failed_workflow_whose_other_branch_waits_can_be_cancelled_once(
        api: APIClient, live_engine: Engine) -> None:
    # The failing member runs (queue wf); the other branch's steps wait on wf-b, served by no one.
    body = {"group": [{"type": "dtq.fail", "payload": {"message": "boom"}, "max_attempts": 1, "queue": "wf"},
                      {"chain": [{"type": "dtq.echo", "queue": "wf-b"}, {"type": "dtq.echo", "queue": "wf-b"}]}]}
    wid = submit(api, body).json()["id"]
    deadline = time.monotonic() + 20
    while api.get(f"/api/v1/workflows/{wid}").json()["status"] == "RUNNING":
        assert time.monotonic() < deadline
        drain(live_engine.config, queues=["wf"])
    shown = api.get(f"/api/v1/workflows/{wid}").json()
    assert (shown["status"], shown["cancellable"], shown["cancelled_at"]) == ("FAILED", True, None)
    response = api.post(f"/api/v1/workflows/{wid}/cancel")
    assert response.status_code == 202, response.content
    wf = response.json()
    assert wf["status"] == "FAILED"  # how it ended; its remaining work is stopped
    assert wf["cancellable"] is False and wf["cancelled_at"]
    assert [s["status"] for s in wf["steps"]] == ["DEAD_LETTERED", "CANCELLED", "CANCELLED"]
    assert wf["steps"][2]["cancel_reason"] == "workflow cancelled"
    error = assert_error(api.post(f"/api/v1/workflows/{wid}/cancel"), 409, "WORKFLOW_FINISHED")
    assert "FAILED" in error["message"]


def test_a_workflow_refused_for_the_queue_limit_registers_none_of_its_queues(
        api: APIClient, live_engine: Engine, settings: Any) -> None:
    # With DTQ_MAX_QUEUES=3 and one queue in use, a chain over six new queues is refused whole,
    # naming the first step whose queue does not fit; the queues are as they were.
    settings.DTQ = {**settings.DTQ, "MAX_QUEUES": 3}
    live_engine.tasks.enqueue("dtq.echo", {}, queue="default")
    before = sorted(live_engine.queues.names())
    body = {"chain": [{"type": "dtq.echo", "queue": f"lim{i}"} for i in range(6)]}
    error = assert_error(submit(api, body), 409, "QUEUE_LIMIT_REACHED")
    assert error["field"] == "chain[2].queue" and "DTQ_MAX_QUEUES" in error["message"]
    assert api.get("/api/v1/workflows").json()["results"] == []
    assert sorted(live_engine.queues.names()) == before


def test_the_schema_names_the_workflow_endpoints(api: APIClient) -> None:
    paths = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"]
    assert set(paths["/api/v1/workflows"]) == {"get", "post"}
    assert "get" in paths["/api/v1/workflows/{workflow_id}"]
    assert "post" in paths["/api/v1/workflows/{workflow_id}/cancel"]


def test_workflow_endpoints_answer_503_when_redis_is_down() -> None:
    api = APIClient()
    base = "/api/v1/workflows/ab12-w" + "0" * 31
    for response in (api.get("/api/v1/workflows"), submit(api, CHAIN), api.get(base), api.post(base + "/cancel")):
        assert_error(response, 503, "REDIS_UNAVAILABLE")


def test_a_frozen_redis_gives_503_within_2_seconds(frozen_redis: RedisServer) -> None:
    api = APIClient()
    for call in (lambda: api.get("/api/v1/workflows"), lambda: submit(api, CHAIN)):
        started = time.monotonic()
        assert_error(call(), 503, "REDIS_UNAVAILABLE")
        assert time.monotonic() - started < 2


def nested(depth: int) -> str:
    """A chain of a chain of ... one step, `depth` deep (built as text: json.dumps would recurse)."""
    return '{"chain": [' * depth + '{"type": "dtq.echo"}' + "]}" * depth


@pytest.mark.parametrize("depth,code", [(33, "VALIDATION_ERROR"), (40, "VALIDATION_ERROR"),
                                        (5000, "MALFORMED_JSON"), (100_000, "MALFORMED_JSON")])
def test_too_deep_a_tree_is_400_not_a_crash(api: APIClient, live_engine: Engine, depth: int, code: str) -> None:
    assert_error(api.post("/api/v1/workflows", nested(depth), content_type="application/json"), 400, code)
    assert api.get("/api/v1/workflows").json()["results"] == []
