"""Valid JSON that Python cannot take further, odd formats and methods, and a Redis URL naming a
database Redis does not have: each is a clear error in the envelope, never a 500, and loses or
changes nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_api.parsers import MAX_JSON_DEPTH
from dtq_core.engine import Engine

from ..redis_server import RedisServer
from .support import assert_error, audit_entries, make_dead_letters

LONE = '"\\ud800"'  # JSON text: an escaped unpaired surrogate, which parses but is not Unicode
DEEP = "[" * 5000 + "]" * 5000


def post(api: APIClient, path: str, raw: str, **headers: str) -> Any:
    """POST JSON text, with @LONE and @DEEP standing for those two values."""
    raw = raw.replace("@LONE", LONE).replace("@DEEP", DEEP)
    return api.post(path, raw, content_type="application/json", headers=headers)


@pytest.mark.parametrize("raw", [
    '{"type": "dtq.echo", "payload": @LONE}',
    '{"type": "dtq.echo", "payload": {@LONE: 1}}',
    '{"type": "dtq.echo", "idempotency_key": @LONE}',
    '{"type": "dtq.echo", "payload": ["ok", {"deeper": ["x\\udfffy"]}]}',
    '{"type": "dtq.echo", "payload": @DEEP}',
])
def test_submit_refuses_strings_that_are_not_unicode_and_deep_nesting(api: APIClient, live_engine: Engine,
                                                                      raw: str) -> None:
    error = assert_error(post(api, "/api/v1/tasks", raw), 400, "MALFORMED_JSON")
    assert "surrogate" in error["message"] or "nested too deeply" in error["message"]
    assert live_engine.queues.stats(["default"])[0]["waiting"] == 0


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def submit_body(path: str, payload: str) -> str:
    task = '{"type": "dtq.echo", "payload": ' + payload + "}"
    return task if path == "/api/v1/tasks" else '{"tasks": [' + task + "]}"


@pytest.mark.parametrize("cookie", [False, True], ids=["fast", "drf"])
@pytest.mark.parametrize("path", ["/api/v1/tasks", "/api/v1/tasks/batch"])
def test_nesting_past_the_bound_is_refused_before_anything_is_queued(api: APIClient, live_engine: Engine,
                                                                     path: str, cookie: bool) -> None:
    # Near the recursion limit (~900 deep, depending on the stack) bodies once parsed and then
    # failed when written back out: 500s, some after the task was queued.
    if cookie:
        api.cookies["unrelated"] = "1"  # through DRF (tests/api/test_fastpath.py)
    around = 1 if path == "/api/v1/tasks" else 3  # levels outside the payload: {...}, {"tasks": [{...}]}
    for depth in (MAX_JSON_DEPTH - around + 1, 895, 899, 903, 950):
        error = assert_error(post(api, path, submit_body(path, nested(depth))), 400, "MALFORMED_JSON")
        assert error["message"].endswith(f"JSON nested too deeply: more than {MAX_JSON_DEPTH} levels")
    assert live_engine.queues.stats(["default"])[0]["waiting"] == 0


@pytest.mark.parametrize("cookie", [False, True], ids=["fast", "drf"])
@pytest.mark.parametrize("path", ["/api/v1/tasks", "/api/v1/tasks/batch"])
def test_a_payload_as_deep_as_the_bound_allows_is_queued_and_read_back(api: APIClient, live_engine: Engine,
                                                                      path: str, cookie: bool) -> None:
    if cookie:
        api.cookies["unrelated"] = "1"
    depth = MAX_JSON_DEPTH - (1 if path == "/api/v1/tasks" else 3)
    response = post(api, path, submit_body(path, nested(depth)))
    assert response.status_code in (200, 201), response.content
    task_id = response.json()["id"] if path == "/api/v1/tasks" else response.json()["results"][0]["id"]
    assert api.get(f"/api/v1/tasks/{task_id}").json()["payload"] == json.loads(nested(depth))
    # Brackets in a string are not nesting, escaped quotes or not.
    text = json.dumps('\\"' + "[" * 1000 + '"\\')
    assert post(api, path, submit_body(path, "[" + text + "]")).status_code in (200, 201)


def test_a_surrogate_pair_is_an_ordinary_character(api: APIClient) -> None:
    response = post(api, "/api/v1/tasks", '{"type": "dtq.echo", "payload": "\\ud83d\\ude00 and \\\\ud800"}')
    assert response.status_code == 201
    assert response.json()["payload"] == "\U0001F600 and \\ud800"  # an escaped backslash is not an escape


def test_one_bad_item_fails_the_batch_body_before_anything_is_queued(api: APIClient, live_engine: Engine) -> None:
    raw = '{"tasks": [{"type": "dtq.echo"}, {"type": "dtq.echo", "payload": @LONE}]}'
    assert_error(post(api, "/api/v1/tasks/batch", raw), 400, "MALFORMED_JSON")
    assert live_engine.queues.stats(["default"])[0]["waiting"] == 0


@pytest.mark.parametrize("raw", ['{"type": @LONE}', '{"q": @LONE}', '{"task_ids": [@LONE]}',
                                 '{"queue": "default", "type": @DEEP}'])
def test_bulk_dlq_actions_refuse_them_and_change_and_audit_nothing(api: APIClient, live_engine: Engine,
                                                                  raw: str) -> None:
    make_dead_letters(live_engine, 2)
    for path in ("/api/v1/dlq/retry", "/api/v1/dlq/discard"):
        assert_error(post(api, path, raw), 400, "MALFORMED_JSON")
    assert live_engine.dlq.count() == 2 and audit_entries(live_engine) == []


def test_an_unknown_format_is_404_with_a_message(api: APIClient) -> None:
    error = assert_error(api.get("/api/v1/tasks?format=xml"), 404, "NOT_FOUND")
    assert "'xml'" in error["message"] and "json" in error["message"]
    assert api.get("/api/v1/tasks?format=json").status_code == 200


@pytest.mark.parametrize("cookie", [False, True], ids=["fast", "drf"])
@pytest.mark.parametrize("length", ["abc", "-1", "1e3", "0x10"])
def test_a_content_length_that_is_not_a_number_is_a_400_and_queues_nothing(api: APIClient, live_engine: Engine,
                                                                           length: str, cookie: bool) -> None:
    # Once a 500: the metrics middleware called int() on the header before any view ran.
    if cookie:
        api.cookies["unrelated"] = "1"
    response = api.post("/api/v1/tasks", '{"type": "dtq.echo"}', content_type="application/json",
                        CONTENT_LENGTH=length)
    assert "Content-Length" in assert_error(response, 400, "VALIDATION_ERROR")["message"]
    assert live_engine.queues.stats(["default"])[0]["waiting"] == 0
    assert api.post("/api/v1/tasks", '{"type": "dtq.echo"}', content_type="application/json").status_code == 201


@pytest.mark.parametrize("path", ["/health", "/ready"])
def test_probes_answer_other_methods_with_405_json_not_a_csrf_page(path: str) -> None:
    client = APIClient(enforce_csrf_checks=True)  # as a browser or load balancer meets them
    for method in (client.post, client.put, client.delete):
        response = method(path)
        assert_error(response, 405, "METHOD_NOT_ALLOWED")
        assert response["Allow"] == "GET, HEAD"


def test_metrics_answers_a_post_with_405(live_engine: Engine) -> None:
    response = APIClient(enforce_csrf_checks=True).post("/metrics")
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"


def test_a_database_redis_does_not_have_is_503_naming_the_variable(settings: Any, redis_server: RedisServer) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": redis_server.url.rsplit("/", 1)[0] + "/99"}
    api = APIClient()
    # (a task id that dtq could have made: anything else names no task without asking Redis)
    for path in ("/ready", "/api/v1/queues", f"/api/v1/tasks/abc123-{'0' * 32}", "/api/v1/dlq"):
        error = assert_error(api.get(path), 503, "REDIS_UNAVAILABLE")
        assert "DTQ_REDIS_URL" in error["message"] and "DB index is out of range" in error["message"]
    response = api.post("/api/v1/tasks", json.dumps({"type": "dtq.echo"}), content_type="application/json")
    assert_error(response, 503, "REDIS_UNAVAILABLE")


@pytest.mark.parametrize(("path", "field"), [
    ("/api/v1/dlq?queue=Not%20A%20Queue", "queue"), ("/api/v1/tasks?queue=dlq", "queue"),
    ("/api/v1/audit?source=email", "source"), ("/api/v1/tasks?type=bad%20type!", "type"),
    ("/api/v1/dlq?type=bad%20type!", "type"),
])
def test_a_filter_that_can_match_nothing_is_a_400_not_an_empty_page(api: APIClient, path: str, field: str) -> None:
    # A typo in a filter used to give an empty page, which reads as "nothing there".
    assert assert_error(api.get(path), 400, "VALIDATION_ERROR")["field"] == field


def test_a_bulk_action_on_a_queue_name_that_cannot_exist_is_refused_and_not_audited(
        api: APIClient, live_engine: Engine) -> None:
    make_dead_letters(live_engine, 1)
    for path in ("/api/v1/dlq/retry", "/api/v1/dlq/discard"):
        error = assert_error(post(api, path, '{"queue": "Default"}'), 400, "VALIDATION_ERROR")
        assert error["field"] == "queue"
        error = assert_error(post(api, path, '{"all": true, "type": "bad type!"}'), 400, "VALIDATION_ERROR")
        assert error["field"] == "type"
    assert live_engine.dlq.count() == 1 and audit_entries(live_engine) == []
