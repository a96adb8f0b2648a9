"""POST/GET /api/v1/tasks, /health and /ready through Django's test client: the envelope,
X-Request-ID, every kind of bad input, and a Redis that is down or frozen."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..redis_server import RedisServer
from .support import assert_error


def post(api: APIClient, body: Any, **headers: str) -> Any:
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    return api.post("/api/v1/tasks", raw, content_type="application/json", headers=headers)


def test_submit_returns_201_with_the_task(api: APIClient, live_engine: Engine) -> None:
    response = post(api, {"type": "dtq.echo", "payload": {"n": 1}, "queue": "api", "priority": "high",
                          "max_attempts": 2, "timeout_seconds": 9, "ttl_seconds": 60})
    assert response.status_code == 201
    task = response.json()
    assert task["status"] == "QUEUED" and task["payload"] == {"n": 1} and task["queue"] == "api"
    assert task["priority"] == "high" and task["max_attempts"] == 2 and task["timeout_s"] == 9
    assert task["expires_at"] and task["request_id"] == response["X-Request-ID"]
    fetched = api.get(f"/api/v1/tasks/{task['id']}")
    assert fetched.status_code == 200 and fetched.json()["id"] == task["id"]


def test_the_request_id_is_taken_from_the_request(api: APIClient) -> None:
    response = post(api, {"type": "dtq.echo"}, **{"X-Request-ID": "trace-abc-123"})
    assert response["X-Request-ID"] == "trace-abc-123" and response.json()["request_id"] == "trace-abc-123"
    assert api.get("/health")["X-Request-ID"]


def test_a_delayed_submit_is_pending(api: APIClient) -> None:
    task = post(api, {"type": "dtq.echo", "delay_seconds": 60}).json()
    assert task["status"] == "PENDING" and task["due_at"]


def test_the_same_idempotency_key_answers_200_with_the_first_task(api: APIClient) -> None:
    first = post(api, {"type": "dtq.echo", "payload": {"v": 1}, "idempotency_key": "k-1"})
    again = post(api, {"type": "dtq.echo", "payload": {"v": 2}, "idempotency_key": "k-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"] and again.json()["payload"] == {"v": 1}


def test_null_optional_fields_mean_not_given(api: APIClient, live_engine: Engine) -> None:
    response = post(api, {"type": "dtq.echo", "payload": None, "delay_seconds": None, "ttl_seconds": None,
                          "max_attempts": None, "timeout_seconds": None, "idempotency_key": None})
    assert response.status_code == 201, response.content
    task = response.json()
    assert task["payload"] == {} and task["status"] == "QUEUED" and task["expires_at"] is None
    assert task["max_attempts"] == live_engine.config.max_attempts and task["idempotency_key"] is None
    for field in ("type", "queue", "priority"):
        assert_error(post(api, {"type": "dtq.echo", field: None}), 400, "VALIDATION_ERROR")


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ("{not json", "MALFORMED_JSON"),
        ("[1, 2]", "VALIDATION_ERROR"),
        ({"payload": {}}, "VALIDATION_ERROR"),
        ({"type": "dtq.echo", "colour": "red"}, "VALIDATION_ERROR"),
        ({"type": "dtq.echo", "queue": "Not A Queue"}, "VALIDATION_ERROR"),
        ({"type": "dtq.echo", "queue": "dlq"}, "VALIDATION_ERROR"),
        ({"type": "dtq.echo", "priority": "asap"}, "VALIDATION_ERROR"),
        ({"type": "dtq.echo", "delay_seconds": -5}, "VALIDATION_ERROR"),
        ({"type": "dtq.echo", "max_attempts": 0}, "VALIDATION_ERROR"),
        ({"type": "dtq.echo", "timeout_seconds": "soon"}, "VALIDATION_ERROR"),
        ({"type": 42}, "VALIDATION_ERROR"),
    ],
)
def test_bad_input_is_400_and_loses_nothing(api: APIClient, live_engine: Engine, body: Any, code: str) -> None:
    kept = post(api, {"type": "dtq.echo", "payload": "keep me"}).json()["id"]
    assert_error(post(api, body), 400, code)
    assert live_engine.tasks.get(kept)["payload"] == "keep me"
    assert live_engine.queues.stats(["default"])[0]["waiting"] == 1


def test_an_oversized_payload_is_413(api: APIClient, live_engine: Engine) -> None:
    big = "x" * (live_engine.config.payload_max_bytes + 10)
    error = assert_error(post(api, {"type": "dtq.echo", "payload": big}), 413, "PAYLOAD_TOO_LARGE")
    assert "DTQ_PAYLOAD_MAX_BYTES" in error["message"]


def test_a_full_queue_is_429(api: APIClient, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "MAX_QUEUE_DEPTH": 1}
    assert post(api, {"type": "dtq.echo"}).status_code == 201
    assert_error(post(api, {"type": "dtq.echo"}), 429, "QUEUE_FULL")
    assert post(api, {"type": "dtq.echo", "delay_seconds": 1}).status_code == 201


def test_unknown_and_expired_tasks_are_404(api: APIClient, live_engine: Engine, redis_client: Any) -> None:
    assert_error(api.get("/api/v1/tasks/does-not-exist"), 404, "TASK_NOT_FOUND")
    task_id = post(api, {"type": "dtq.echo"}).json()["id"]
    redis_client.delete(live_engine.keys.task(task_id))  # what the retention TTL does
    assert_error(api.get(f"/api/v1/tasks/{task_id}"), 404, "TASK_NOT_FOUND")


def test_wrong_methods_and_unknown_routes_use_the_envelope(api: APIClient) -> None:
    assert_error(api.delete("/api/v1/tasks"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.get("/api/v1/nothing-here"), 404, "NOT_FOUND")


def test_health_and_ready(api: APIClient) -> None:
    assert api.get("/health").json() == {"status": "ok"}
    assert api.get("/ready").json() == {"status": "ready"}


@pytest.fixture
def frozen_redis(tmp_path: Path, settings: Any, key_prefix: str) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "frozen", appendonly=False).start()
    settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": key_prefix}
    yield server
    server.stop()


@pytest.mark.parametrize("how", ["stopped", "frozen"])
def test_redis_down_is_503_within_two_seconds(api: APIClient, frozen_redis: RedisServer, how: str) -> None:
    accepted = post(api, {"type": "dtq.echo", "payload": "before"}).json()["id"]
    if how == "stopped":
        frozen_redis.stop()
    else:
        frozen_redis.pause()  # SIGSTOP: connections hang rather than fail
    for request in (lambda: post(api, {"type": "dtq.echo"}), lambda: api.get(f"/api/v1/tasks/{accepted}"),
                    lambda: api.get("/ready")):
        started = time.monotonic()
        response = request()
        assert time.monotonic() - started < 2.0
        assert_error(response, 503, "REDIS_UNAVAILABLE")
    assert api.get("/health").status_code == 200  # liveness does not depend on Redis
    if how == "frozen":
        frozen_redis.resume()
        assert api.get("/ready").status_code == 200
        assert api.get(f"/api/v1/tasks/{accepted}").json()["payload"] == "before"  # nothing lost


def test_a_submit_is_one_redis_round_trip(api: APIClient, count_writes: Callable[[], list[int]]) -> None:
    # The enqueue script returns the new task's record, so the response needs no second read;
    # an idempotency hit returns the first task the same way.
    post(api, {"type": "dtq.echo"})  # warm up: the script is loaded once per client
    sends = count_writes()
    first = post(api, {"type": "dtq.echo", "payload": {"n": 1}, "idempotency_key": "rt-1"})
    again = post(api, {"type": "dtq.echo", "idempotency_key": "rt-1"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["payload"] == {"n": 1} and len(sends) == 2


def test_a_key_whose_first_task_record_expired_answers_200_with_its_id(
        api: APIClient, live_engine: Engine, redis_client: Any) -> None:
    body = {"type": "dtq.echo", "idempotency_key": "webhook-77"}
    first = post(api, body).json()
    redis_client.delete(live_engine.keys.task(first["id"]))  # retention shorter than the key's TTL
    response = post(api, body)
    assert response.status_code == 200
    assert response.json() == {"id": first["id"], "status": "UNKNOWN"}  # no second task was made


def test_a_group_key_is_stored_and_shown_and_a_bad_one_refused(api: APIClient) -> None:
    # Flow control (issue 22): the task's group for its queue's group limits.
    task = post(api, {"type": "dtq.echo", "group_key": "tenant-42"})
    assert task.status_code == 201 and task.json()["group_key"] == "tenant-42"
    assert api.get(f"/api/v1/tasks/{task.json()['id']}").json()["group_key"] == "tenant-42"
    assert post(api, {"type": "dtq.echo"}).json()["group_key"] is None
    for bad in ("", "x" * 201, 7):
        response = post(api, {"type": "dtq.echo", "group_key": bad})
        assert response.status_code == 400 and "group_key" in response.content.decode(), bad
