"""GET /api/v1/tasks (cursor pages, filters), POST /api/v1/tasks/batch and /tasks/<id>/cancel."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.keys import tag_of

from ..conftest import wait_for
from ..redis_server import RedisServer
from .support import assert_error, drain


def batch(api: APIClient, body: Any) -> Any:
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return api.post("/api/v1/tasks/batch", raw, content_type="application/json")


# -- list -------------------------------------------------------------------------------------

def test_list_pages_through_every_task_newest_first_even_within_one_millisecond(
        api: APIClient, live_engine: Engine) -> None:
    # A batch puts many tasks in the same millisecond: the cursor must not skip any of them.
    ids = [r["id"] for r in batch(api, {"tasks": [{"type": "dtq.echo", "payload": i} for i in range(23)]}
                                  ).json()["results"]]
    seen: list[str] = []
    url: str | None = "/api/v1/tasks?limit=5"
    while url:
        page = api.get(url).json()
        assert len(page["results"]) <= 5
        seen.extend(t["id"] for t in page["results"])
        url = page["next"]
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    created = [api.get(f"/api/v1/tasks/{i}").json()["created_at"] for i in seen]
    assert created == sorted(created, reverse=True)


def test_list_filters_by_queue_status_and_type(api: APIClient, live_engine: Engine) -> None:
    batch(api, {"tasks": [{"type": "dtq.echo", "queue": "a"}, {"type": "dtq.sleep", "queue": "b"},
                          {"type": "dtq.echo", "queue": "b", "delay_seconds": 60}]})
    assert {t["queue"] for t in api.get("/api/v1/tasks?queue=b").json()["results"]} == {"b"}
    assert len(api.get("/api/v1/tasks?queue=b").json()["results"]) == 2
    pending = api.get("/api/v1/tasks?status=PENDING").json()["results"]
    assert [t["status"] for t in pending] == ["PENDING"]
    assert [t["type"] for t in api.get("/api/v1/tasks?type=dtq.sleep").json()["results"]] == ["dtq.sleep"]
    assert api.get("/api/v1/tasks?queue=nothing").json() == {"results": [], "next": None, "stopped_early": False}


@pytest.mark.parametrize("query", ["limit=0", "limit=501", "limit=abc", "limit=-1", "limit=%C2%B2",
                                   "cursor=abc", "cursor=%C2%B2-1", "cursor=12-", "cursor=12-x", "status=DONE",
                                   "queue=" + "q" * 201])
def test_list_refuses_bad_parameters(api: APIClient, query: str) -> None:
    assert_error(api.get(f"/api/v1/tasks?{query}"), 400, "VALIDATION_ERROR")


def test_list_answers_503_when_redis_is_down(settings: Any) -> None:
    assert_error(APIClient().get("/api/v1/tasks"), 503, "REDIS_UNAVAILABLE")


# -- batch ------------------------------------------------------------------------------------

def test_batch_enqueues_valid_items_and_reports_invalid_ones_in_their_slot(
        api: APIClient, live_engine: Engine) -> None:
    response = batch(api, {"tasks": [
        {"type": "dtq.echo", "payload": {"n": 1}},
        {"type": "bad type!"},
        {"type": "dtq.echo", "queue": "Upper"},
        "not an object",
        {"type": "dtq.echo", "colour": "red"},
        {"type": "dtq.echo", "priority": "high", "delay_seconds": 30},
    ]})
    assert response.status_code == 200
    results = response.json()["results"]
    assert len(results) == 6
    assert results[0]["status"] == "QUEUED" and results[0]["created"] is True
    assert results[5]["status"] == "PENDING"
    for i in (1, 2, 3, 4):
        assert results[i]["error"]["code"] == "VALIDATION_ERROR" and results[i]["error"]["message"]
    assert results[1]["error"]["field"] == "type" and results[2]["error"]["field"] == "queue"
    assert live_engine.tasks.get(results[0]["id"])["payload"] == {"n": 1}
    assert live_engine.tasks.get(results[5]["id"])["priority"] == "high"


def test_batch_items_share_idempotency_keys_in_order(api: APIClient) -> None:
    results = batch(api, {"tasks": [{"type": "dtq.echo", "idempotency_key": "k1"},
                                    {"type": "dtq.echo", "idempotency_key": "k1"}]}).json()["results"]
    assert results[0]["id"] == results[1]["id"]
    assert results[0]["created"] is True and results[1]["created"] is False


def test_batch_reports_a_full_queue_per_item(api: APIClient, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "MAX_QUEUE_DEPTH": 2}
    results = batch(api, {"tasks": [{"type": "dtq.echo"}] * 3}).json()["results"]
    assert [("id" in r) for r in results] == [True, True, False]
    assert results[2]["error"]["code"] == "QUEUE_FULL"


def test_batch_reports_an_oversized_payload_per_item(api: APIClient, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "PAYLOAD_MAX_BYTES": 100}
    results = batch(api, {"tasks": [{"type": "dtq.echo", "payload": "x" * 200}, {"type": "dtq.echo"}]}
                    ).json()["results"]
    assert results[0]["error"]["code"] == "PAYLOAD_TOO_LARGE" and "id" in results[1]


def test_batch_accepts_1000_and_refuses_1001(api: APIClient, live_engine: Engine) -> None:
    started = time.monotonic()
    ok = batch(api, {"tasks": [{"type": "dtq.echo"}] * 1000})
    assert ok.status_code == 200 and len(ok.json()["results"]) == 1000
    assert time.monotonic() - started < 10
    assert live_engine.queues.get("default")["waiting"] == 1000
    error = assert_error(batch(api, {"tasks": [{"type": "dtq.echo"}] * 1001}), 400, "VALIDATION_ERROR")
    assert "tasks" in error["message"]
    assert live_engine.queues.get("default")["waiting"] == 1000


@pytest.mark.parametrize("body", [{}, {"tasks": "x"}, {"tasks": {"type": "dtq.echo"}}, [], "null",
                                  {"tasks": [], "extra": 1}])
def test_batch_refuses_a_body_of_the_wrong_shape(api: APIClient, body: Any) -> None:
    assert_error(batch(api, body), 400, "VALIDATION_ERROR")


def test_batch_refuses_malformed_json_and_a_body_too_large(api: APIClient) -> None:
    assert_error(batch(api, '{"tasks": ['), 400, "MALFORMED_JSON")
    huge = json.dumps({"tasks": [{"type": "dtq.echo", "payload": "x" * 1_000_000}] * 3})
    assert_error(batch(api, huge), 413, "PAYLOAD_TOO_LARGE")


def test_an_empty_batch_is_an_empty_answer(api: APIClient) -> None:
    assert batch(api, {"tasks": []}).json() == {"results": []}


def test_batch_answers_503_when_redis_is_down(settings: Any) -> None:
    assert_error(batch(APIClient(), {"tasks": [{"type": "dtq.echo"}]}), 503, "REDIS_UNAVAILABLE")


def test_a_batch_to_a_frozen_redis_gives_503_within_2_seconds(frozen_redis: RedisServer, settings: Any) -> None:
    # One read of the registry times out; the batch's other tasks do not each wait for another.
    settings.DTQ = {**settings.DTQ, "ACCEPT_UNKNOWN_TYPES": True}  # no read of the types first
    started = time.monotonic()
    items = [{"type": "dtq.echo", "queue": f"q{i % 5}"} for i in range(50)]
    assert_error(batch(APIClient(), {"tasks": items}), 503, "REDIS_UNAVAILABLE")
    assert time.monotonic() - started < 2


def test_a_batch_item_redis_fails_gets_its_error_in_its_slot_and_the_others_land(
        api: APIClient, live_engine: Engine, redis_client: redis.Redis) -> None:
    # A key of the wrong type (set by hand) fails one task's command in Redis. The others landed:
    # a 500 for the whole batch would have the client send them again.
    layout = live_engine.registry.ensure("err")
    redis_client.hset(live_engine.keys.partition(layout.tag_for("bad")) + "idem:bad", "x", "1")
    items = [{"type": "dtq.echo", "queue": "err", "payload": i} for i in range(3)]
    items[1]["idempotency_key"] = "bad"
    response = batch(api, {"tasks": items})
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[1]["error"]["code"] == "INTERNAL_ERROR" and "WRONGTYPE" in results[1]["error"]["message"]
    assert results[1]["error"]["request_id"] == response["X-Request-ID"]
    assert [live_engine.tasks.get(results[i]["id"])["payload"] for i in (0, 2)] == [0, 2]
    assert live_engine.queues.get("err")["waiting"] == 2
    # When every task failed, nothing landed: the request fails as a whole, as before.
    failing = batch(APIClient(raise_request_exception=False), {"tasks": [items[1]]})
    assert_error(failing, 500, "INTERNAL_ERROR")
    assert live_engine.queues.get("err")["waiting"] == 2


def test_batch_and_cancel_refuse_wrong_methods(api: APIClient) -> None:
    assert_error(api.get("/api/v1/tasks/batch"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.get("/api/v1/tasks/abc/cancel"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.put("/api/v1/tasks/abc"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.patch("/api/v1/tasks/abc/run-now"), 405, "METHOD_NOT_ALLOWED")


# -- cancel -----------------------------------------------------------------------------------

def test_cancel_of_a_queued_task_is_202_and_audited(api: APIClient, live_engine: Engine) -> None:
    task = live_engine.tasks.enqueue("dtq.echo")
    response = api.post(f"/api/v1/tasks/{task.id}/cancel", HTTP_X_REQUEST_ID="req-cancel-1")
    assert response.status_code == 202
    assert response.json()["id"] == task.id and response.json()["status"] == "CANCELLED"
    entry = live_engine.audit.list(limit=1).items[0]
    assert entry["action"] == "task.cancel" and entry["target"] == f"task:{task.id}" and entry["count"] == 1
    assert entry["actor"] == "api:anonymous" and entry["source"] == "api" and entry["request_id"] == "req-cancel-1"
    assert_error(api.post(f"/api/v1/tasks/{task.id}/cancel"), 409, "TASK_TERMINAL")
    assert len(live_engine.audit.list().items) == 1  # a refused cancel is not audited


def test_cancel_of_a_delayed_task_removes_it_from_the_schedule(api: APIClient, live_engine: Engine) -> None:
    task = live_engine.tasks.enqueue("dtq.echo", delay_seconds=60)
    assert api.post(f"/api/v1/tasks/{task.id}/cancel").json()["status"] == "CANCELLED"
    assert live_engine.client.zcard(live_engine.keys.schedule(tag_of(task.id))) == 0
    assert live_engine.schedule.count() == 0


def test_cancel_of_a_running_task_is_202_then_409_while_in_flight(
        api: APIClient, live_engine: Engine, start_worker: Any) -> None:
    task = live_engine.tasks.enqueue("dtq.sleep_sync", {"seconds": 3})
    worker = start_worker("--concurrency", "1")
    wait_for(lambda: live_engine.tasks.get(task.id)["status"] == "RUNNING", timeout=20)
    first = api.post(f"/api/v1/tasks/{task.id}/cancel")
    assert first.status_code == 202 and first.json()["cancel_requested"] is True
    second = api.post(f"/api/v1/tasks/{task.id}/cancel")
    if second.status_code != 409 or second.json()["error"]["code"] != "TASK_TERMINAL":
        assert_error(second, 409, "CANCEL_REQUESTED")
    wait_for(lambda: live_engine.tasks.get(task.id)["status"] == "CANCELLED", timeout=20)
    worker.kill()


@pytest.mark.parametrize("task_id", ["nope", "a" * 129, "x:y", "0" * 32, "ab{c}-" + "0" * 32, "abc123-" + "0" * 32])
def test_cancel_of_an_unknown_task_is_404(api: APIClient, task_id: str) -> None:
    # Only a well-formed id of no task reaches Redis; anything else names no task at all.
    assert_error(api.post(f"/api/v1/tasks/{task_id}/cancel"), 404, "TASK_NOT_FOUND")
    assert_error(api.get(f"/api/v1/tasks/{task_id}"), 404, "TASK_NOT_FOUND")


def test_cancel_answers_503_when_redis_is_down(settings: Any) -> None:
    assert_error(APIClient().post(f"/api/v1/tasks/abc123-{'0' * 32}/cancel"), 503, "REDIS_UNAVAILABLE")


@pytest.mark.parametrize("stored", ["NaN", '{"x":Infinity}', "[-Infinity]"])
def test_get_shows_a_result_older_versions_stored_as_invalid_json(api: APIClient, live_engine: Engine,
                                                                  stored: str) -> None:
    # It should answer 200 with the stored text, not 500: strict JSON has no NaN or Infinity.
    task_id = live_engine.tasks.enqueue("dtq.echo", {}).id
    live_engine.client.set(live_engine.keys.result(task_id), stored)
    response = api.get(f"/api/v1/tasks/{task_id}")
    assert response.status_code == 200 and response.json()["result"] == stored


# -- finished records (dtq_core/scripts/includes/retain.lua) ---------------------------------

def test_a_succeeded_task_reads_back_compact_by_id_and_in_the_listing(api: APIClient, live_engine: Engine) -> None:
    task_id = api.post("/api/v1/tasks", {"type": "dtq.echo", "payload": {"n": 1}, "queue": "kept"},
                       format="json").json()["id"]
    drain(live_engine.config, queues=["kept"])
    task = api.get(f"/api/v1/tasks/{task_id}").json()
    assert task["id"] == task_id and task["status"] == "SUCCEEDED" and task["compact"] is True
    assert task["payload"] is None and task["result"] == {"n": 1} and task["attempt"] == 1
    assert task["queue"] == "kept" and task["type"] == "dtq.echo" and task["priority"] == "normal"
    assert task["created_at"] and task["started_at"] and task["finished_at"] == task["updated_at"]
    (listed,) = api.get("/api/v1/tasks?queue=kept&status=SUCCEEDED").json()["results"]
    assert listed["id"] == task_id and listed["compact"] is True


def test_a_dead_lettered_task_keeps_its_payload_and_its_retry_runs(api: APIClient, live_engine: Engine) -> None:
    task_id = api.post("/api/v1/tasks", {"type": "dtq.fail", "payload": {"retryable": False}, "queue": "kept",
                                         "max_attempts": 1}, format="json").json()["id"]
    drain(live_engine.config, queues=["kept"])
    task = api.get(f"/api/v1/tasks/{task_id}").json()
    assert task["status"] == "DEAD_LETTERED" and task["compact"] is False and task["payload"] == {"retryable": False}
    assert api.post(f"/api/v1/dlq/{task['dlq_entry_id']}/retry").status_code == 200
    drain(live_engine.config, queues=["kept"])
    again = api.get(f"/api/v1/tasks/{task_id}").json()
    assert again["status"] == "DEAD_LETTERED" and again["payload"] == {"retryable": False}
    assert again["retried_from_dlq_at"]
