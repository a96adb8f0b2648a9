"""Unique tasks through the API (issue 22): POST /api/v1/tasks and /api/v1/tasks/batch answer 201
for a new task and 200 with the existing one, saying which in "unique"; bad fields are 400s."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from .support import assert_error


def post(api: APIClient, body: Any, *, drf: bool = False) -> Any:
    raw = body if isinstance(body, (str, bytes)) else json.dumps(body)
    if drf:  # a cookie sends the call through DRF instead of the fast path (dtq_api.fastpath)
        api.cookies["unrelated"] = "1"
    try:
        return api.post("/api/v1/tasks", raw, content_type="application/json")
    finally:
        if drf:
            del api.cookies["unrelated"]


def batch(api: APIClient, items: list[Any]) -> Any:
    return api.post("/api/v1/tasks/batch", json.dumps({"tasks": items}), content_type="application/json")


@pytest.mark.parametrize("drf", [False, True])
def test_a_held_key_answers_200_with_the_existing_task(api: APIClient, drf: bool) -> None:
    body = {"type": "dtq.echo", "payload": {"n": 1}, "unique_key": "invoice-9", "unique_mode": "while_active"}
    first = post(api, body, drf=drf)
    assert first.status_code == 201, first.content
    task = first.json()
    assert task["unique"] == {"existing": False, "mode": "while_active", "key": "invoice-9"}
    assert task["unique_key"] == "invoice-9" and task["unique_mode"] == "while_active"
    again = post(api, {**body, "payload": {"n": 2}}, drf=drf)
    assert again.status_code == 200, again.content
    assert again.json()["id"] == task["id"] and again.json()["payload"] == {"n": 1}
    assert again.json()["unique"] == {"existing": True, "mode": "while_active", "key": "invoice-9"}
    shown = api.get(f"/api/v1/tasks/{task['id']}").json()
    assert shown["unique_key"] == "invoice-9" and "unique" not in shown  # only a submit's answer says it


def test_a_debounced_submit_answers_200_with_the_new_payload(api: APIClient) -> None:
    body = {"type": "dtq.echo", "unique_key": "search", "unique_mode": "debounce", "unique_window_s": 30}
    first = post(api, {**body, "payload": {"q": "do"}})
    second = post(api, {**body, "payload": {"q": "dogs"}})
    assert (first.status_code, second.status_code) == (201, 200)
    assert second.json()["id"] == first.json()["id"] and second.json()["payload"] == {"q": "dogs"}
    assert second.json()["status"] == "PENDING" and second.json()["due_at"] >= first.json()["due_at"]
    assert second.json()["unique"] == {"existing": True, "mode": "debounce", "key": "search"}


def test_a_throttled_submit_answers_200(api: APIClient) -> None:
    body = {"type": "dtq.echo", "unique_key": "ping", "unique_mode": "throttle", "unique_window_s": 60}
    first, second = post(api, body), post(api, body)
    assert (first.status_code, second.status_code) == (201, 200) and first.json()["id"] == second.json()["id"]


def test_a_submit_without_unique_fields_says_nothing_of_them(api: APIClient) -> None:
    task = post(api, {"type": "dtq.echo", "unique_key": None, "unique_mode": None, "unique_window_s": None}).json()
    assert "unique" not in task and "unique_key" not in task and task["status"] == "QUEUED"


def test_a_batch_says_per_item_whether_it_was_new(api: APIClient, live_engine: Engine) -> None:
    item = {"type": "dtq.echo", "unique_key": "b", "unique_mode": "while_active"}
    response = batch(api, [item, {"type": "dtq.echo"}, {**item, "payload": {"n": 2}},
                           {**item, "unique_mode": "sometimes"}])
    assert response.status_code == 200, response.content
    first, plain, again, bad = response.json()["results"]
    assert first["created"] and first["unique"] == {"existing": False, "mode": "while_active", "key": "b"}
    assert plain["created"] and "unique" not in plain
    assert again["id"] == first["id"] and not again["created"] and again["unique"]["existing"] is True
    assert bad["error"]["code"] == "VALIDATION_ERROR" and "unique_mode" in bad["error"]["message"]
    assert len(live_engine.tasks.list(queue="default").items) == 2


def test_a_held_key_answers_200_even_when_the_queue_is_full(api: APIClient, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "MAX_QUEUE_DEPTH": 1}
    body = {"type": "dtq.echo", "unique_key": "k", "unique_mode": "while_active"}
    assert post(api, body).status_code == 201
    assert post(api, body).status_code == 200  # nothing is added: the gate has nothing to refuse
    assert_error(post(api, {**body, "unique_key": "other"}), 429, "QUEUE_FULL")


@pytest.mark.parametrize(("extra", "words"), [
    ({"unique_mode": "throttle"}, "needs a unique_key"),
    ({"unique_window_s": 5}, "needs a unique_key"),
    ({"unique_key": "k"}, "needs a unique_mode"),
    ({"unique_key": "k", "unique_mode": "THROTTLE", "unique_window_s": 5}, "unique_mode must be one of"),
    ({"unique_key": "k", "unique_mode": "debounce"}, "needs unique_window_s"),
    ({"unique_key": "k", "unique_mode": "throttle", "unique_window_s": 0}, "unique_window_s must be between"),
    ({"unique_key": "k", "unique_mode": "throttle", "unique_window_s": "10"}, "unique_window_s must be a number"),
    ({"unique_key": "k", "unique_mode": "throttle", "unique_window_s": 1e300}, "unique_window_s must be between"),
    ({"unique_key": ["k"], "unique_mode": "while_active"}, "unique_key must be a string"),
    ({"unique_key": "x" * 201, "unique_mode": "while_active"}, "unique_key must be a string of 1-200"),
    ({"unique_key": "", "unique_mode": "while_active"}, "unique_key must be a string of 1-200"),
    ({"unique_key": {"a": 1}, "unique_mode": "while_active"}, "unique_key must be a string"),
    ({"unique_key": "k", "unique_mode": 1}, "unique_mode must be one of"),
    ({"unique_kee": "k"}, "unknown field"),
])
@pytest.mark.parametrize("drf", [False, True])
def test_bad_unique_fields_are_400_and_queue_nothing(api: APIClient, live_engine: Engine, extra: dict[str, Any],
                                                      words: str, drf: bool) -> None:
    error = assert_error(post(api, {"type": "dtq.echo", **extra}, drf=drf), 400, "VALIDATION_ERROR")
    assert words in error["message"], error
    assert live_engine.tasks.list().items == []


def test_malformed_json_and_a_non_unicode_key_are_400(api: APIClient, live_engine: Engine) -> None:
    assert_error(post(api, '{"type": "dtq.echo", "unique_key": '), 400, "MALFORMED_JSON")
    error = assert_error(post(api, '{"type": "dtq.echo", "unique_key": "\\ud800", "unique_mode": "while_active"}'),
                         400, "MALFORMED_JSON")
    assert "surrogate" in error["message"] and live_engine.tasks.list().items == []


def test_an_oversized_body_is_413(api: APIClient, live_engine: Engine) -> None:
    huge = "k" * (live_engine.config.payload_max_bytes * 2 + 70_000)  # past DATA_UPLOAD_MAX_MEMORY_SIZE
    assert_error(post(api, {"type": "dtq.echo", "unique_key": huge, "unique_mode": "while_active"}), 413,
                 "PAYLOAD_TOO_LARGE")


@pytest.mark.parametrize("path", ["/api/v1/tasks", "/api/v1/tasks/batch"])
def test_a_unique_submit_answers_503_when_redis_is_down(settings: Any, path: str) -> None:
    body = {"type": "dtq.echo", "unique_key": "k", "unique_mode": "throttle", "unique_window_s": 5}
    response = APIClient().post(path, json.dumps(body if path.endswith("tasks") else {"tasks": [body]}),
                                content_type="application/json")
    assert_error(response, 503, "REDIS_UNAVAILABLE")
