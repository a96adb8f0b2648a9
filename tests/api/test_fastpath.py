"""A plain JSON submit (dtq_api.fastpath) answers exactly as the same call through DRF would:
status, body and headers, for good bodies and every kind of bad one. A cookie sends the same
call through DRF, which is how the two are compared."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.response import Response
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from .support import serve_types

VOLATILE = {"id", "created_at", "updated_at", "enqueued_at", "expires_at", "due_at", "request_id"}


def steady(value: Any) -> Any:
    """The answer without what differs between two submits (ids, times, request ids)."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def both(api: APIClient, path: str, body: bytes | str, **headers: str) -> tuple[Any, Any]:
    """The same POST without a cookie (the fast path) and with one (DRF)."""
    fast = api.post(path, body, content_type="application/json", headers=headers)
    api.cookies["unrelated"] = "1"  # any cookie: it might carry a session, so DRF decides
    try:
        drf = api.post(path, body, content_type="application/json", headers=headers)
    finally:
        del api.cookies["unrelated"]
    assert not isinstance(fast, Response) and isinstance(drf, Response)  # each went its own way
    return fast, drf


def assert_same(fast: Any, drf: Any) -> None:
    assert fast.status_code == drf.status_code, (fast.content, drf.content)
    assert steady(json.loads(fast.content)) == steady(json.loads(drf.content))
    for header in ("Content-Type", "Allow", "Vary"):
        assert fast.get(header) == drf.get(header), header
    assert fast["X-Request-ID"] and json.loads(fast.content).get("error", {}).get("request_id",
                                                                                    fast["X-Request-ID"]) == \
        fast["X-Request-ID"]


SUBMITS: list[Any] = [
    {"type": "dtq.echo", "payload": {"n": 1}, "queue": "fast", "priority": "high", "ttl_seconds": 60},
    {"type": "dtq.echo", "delay_seconds": 30, "max_attempts": 2, "timeout_seconds": 5},
    "{not json", '{"type": "dtq.echo", "payload": "\\ud800"}', "[" * 5000 + "]" * 5000, "[1]", "null",
    '{"type": "dtq.echo", "payload": {"x": 1e400}}', {"type": "dtq.echo", "extra": 1}, {"payload": {}},
    {"type": None}, {"type": "bad type!"}, {"type": "dtq.echo", "queue": "Bad Queue"},
    {"type": "dtq.echo", "priority": "urgent"}, {"type": "dtq.echo", "delay_seconds": -1},
    {"type": "no.worker.serves.this"}, "",
]


@pytest.mark.parametrize("body", SUBMITS, ids=range(len(SUBMITS)))
def test_a_plain_json_submit_answers_as_drf(api: APIClient, live_engine: Engine, body: Any) -> None:
    serve_types(live_engine, "dtq.echo")  # so an unknown type is refused (UNKNOWN_TASK_TYPE)
    raw = body if isinstance(body, str) else json.dumps(body)
    assert_same(*both(api, "/api/v1/tasks", raw))


def test_a_payload_past_the_limit_and_an_idempotent_repeat_answer_as_drf(api: APIClient,
                                                                         live_engine: Engine) -> None:
    big = json.dumps({"type": "dtq.echo", "payload": "x" * (live_engine.config.payload_max_bytes + 10)})
    assert_same(*both(api, "/api/v1/tasks", big))
    api.post("/api/v1/tasks", json.dumps({"type": "dtq.echo", "idempotency_key": "k"}), content_type="application/json")
    fast, drf = both(api, "/api/v1/tasks", json.dumps({"type": "dtq.echo", "idempotency_key": "k"}))
    assert fast.status_code == 200 and fast.json()["id"] == drf.json()["id"]  # the first task, both ways
    assert_same(fast, drf)


BATCHES: list[Any] = [
    {"tasks": [{"type": "dtq.echo"}, {"type": "bad type!"}, None, {"type": "dtq.echo", "queue": "b"}]},
    {"tasks": [{"type": "dtq.echo"}] * 1001}, {"tasks": "x"}, {"tasks": [None]}, {"task": []}, [], "{",
    {"tasks": [{"type": "dtq.echo", "payload": "x" * 1_000_000}] * 3},  # past DATA_UPLOAD_MAX_MEMORY_SIZE: 413
]


@pytest.mark.parametrize("body", BATCHES, ids=range(len(BATCHES)))
def test_a_plain_json_batch_answers_as_drf(api: APIClient, live_engine: Engine, body: Any) -> None:
    raw = body if isinstance(body, str) else json.dumps(body)
    assert_same(*both(api, "/api/v1/tasks/batch", raw))


def test_other_calls_still_go_through_drf(api: APIClient) -> None:
    body = json.dumps({"type": "dtq.echo"})
    for headers, query in (({"Accept": "text/html"}, ""), ({}, "?format=json"), ({"Accept": "application/xml"}, "")):
        response = api.post("/api/v1/tasks" + query, body, content_type="application/json", headers=headers)
        assert isinstance(response, Response), (headers, query)
    form = api.post("/api/v1/tasks", {"type": "dtq.echo"})  # a form body: DRF answers 415
    assert isinstance(form, Response) and form.status_code == 415
