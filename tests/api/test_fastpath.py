"""A plain JSON submit (dtq_api.fastpath) answers exactly as the same call through DRF would:
status, body and headers, for good bodies and every kind of bad one. A cookie sends the same
call through DRF, which is how the two are compared."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
import rest_framework.views
from django.core.cache import cache
from rest_framework.exceptions import NotAcceptable
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.response import Response
from rest_framework.test import APIClient
from rest_framework.throttling import AnonRateThrottle
from rest_framework.versioning import AcceptHeaderVersioning

from dtq_core.engine import Engine
from dtq_site.asgi import application

from ..conftest import worker_env
from .support import assert_error, serve_types

VOLATILE = {"id", "created_at", "updated_at", "enqueued_at", "expires_at", "due_at", "request_id"}


def steady(value: Any) -> Any:
    """The answer without what differs between two submits (ids, times, request ids)."""
    if isinstance(value, dict):
        return {k: steady(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [steady(v) for v in value]
    return value


def both(api: APIClient, path: str, body: bytes | str, content_type: str = "application/json",
         **headers: str) -> tuple[Any, Any]:
    """The same POST without a cookie (the fast path) and with one (DRF)."""
    fast = api.post(path, body, content_type=content_type, headers=headers)
    api.cookies["unrelated"] = "1"  # any cookie: it might carry a session, so DRF decides
    try:
        drf = api.post(path, body, content_type=content_type, headers=headers)
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


def waiting(engine: Engine) -> int:
    return int(engine.queues.stats(["default"])[0]["waiting"])


@pytest.mark.parametrize("path", ["/api/v1/tasks", "/api/v1/tasks/batch"])
def test_an_empty_accept_header_goes_through_drf_and_is_a_406(api: APIClient, live_engine: Engine,
                                                              path: str) -> None:
    # An empty Accept is not a missing one: DRF finds no renderer for it. It once took the fast path.
    body = '{"type": "dtq.echo"}' if path == "/api/v1/tasks" else '{"tasks": [{"type": "dtq.echo"}]}'
    response = api.post(path, body, content_type="application/json", headers={"Accept": ""})
    assert isinstance(response, Response)
    assert_error(response, 406, "NOT_ACCEPTABLE")
    assert waiting(live_engine) == 0


UNDECODABLE = [
    (b'{"type": "dtq.echo"}\xe2\x82', "application/json"),  # a UTF-8 character cut short at the end
    ('{"type": "dtq.echo"}'.encode("utf-16") + b"\x00", "application/json; charset=utf-16"),  # an odd byte
    (b"7b7d", "application/json; charset=hex_codec"),  # codecs that are not text: bytes to bytes
    (b"7b7d", "application/json; charset=bz2_codec"),
    (b"e30=", "application/json; charset=base64_codec"),
]


@pytest.mark.parametrize("path", ["/api/v1/tasks", "/api/v1/tasks/batch"])
@pytest.mark.parametrize(("body", "content_type"), UNDECODABLE, ids=range(len(UNDECODABLE)))
def test_a_body_that_does_not_decode_is_malformed_json_both_ways(api: APIClient, live_engine: Engine, path: str,
                                                                  body: bytes, content_type: str) -> None:
    # DRF's decoding reader dropped an incomplete last character and queued the task; a charset
    # such as hex_codec made the fast path's bytes.decode raise (a 500).
    serve_types(live_engine, "dtq.echo")
    fast, drf = both(api, path, body, content_type=content_type)
    assert_same(fast, drf)
    assert_error(fast, 400, "MALFORMED_JSON")
    assert waiting(live_engine) == 0


def test_a_non_text_charset_is_named_in_the_message(api: APIClient) -> None:
    fast, drf = both(api, "/api/v1/tasks", b"7b7d", content_type="application/json; charset=hex_codec")
    assert fast.json()["error"]["message"].endswith('Unsupported charset "hex_codec" in request Content-Type header.')
    assert_same(fast, drf)


class OnePerMinute(AnonRateThrottle):
    rate = "1/min"


class RefuseAll(BaseContentNegotiation):
    def select_parser(self, request: Any, parsers: Any) -> Any:
        raise NotAcceptable("the project's negotiation")

    def select_renderer(self, request: Any, renderers: Any, format_suffix: str | None = None) -> Any:
        raise NotAcceptable("the project's negotiation")


class VersionRequired(AcceptHeaderVersioning):
    allowed_versions = ("2",)


def test_a_projects_rest_framework_defaults_do_not_reach_dtqs_views(api: APIClient, live_engine: Engine,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # What REST_FRAMEWORK's DEFAULT_THROTTLE_CLASSES, DEFAULT_VERSIONING_CLASS and
    # DEFAULT_CONTENT_NEGOTIATION_CLASS do at import: set DRF's APIView attributes. Through DRF
    # they once throttled dtq's API (the fast path did not).
    monkeypatch.setattr(rest_framework.views.APIView, "throttle_classes", [OnePerMinute])
    monkeypatch.setattr(rest_framework.views.APIView, "versioning_class", VersionRequired)
    monkeypatch.setattr(rest_framework.views.APIView, "content_negotiation_class", RefuseAll)
    cache.clear()
    try:
        for _ in range(2):
            fast, drf = both(api, "/api/v1/tasks", '{"type": "dtq.echo"}')
            assert_same(fast, drf)
            assert drf.status_code == 201
        assert api.get("/api/v1/tasks", headers={"Accept": "application/json; version=1"}).status_code == 200
    finally:
        cache.clear()  # the throttle's history, had it run


async def post_chunked(path: str, chunks: list[bytes], *headers: tuple[bytes, bytes]) -> tuple[int, Any]:
    """A POST straight into the ASGI application with no Content-Length, its body in chunks, as
    daphne passes on a Transfer-Encoding: chunked request; (status, JSON answer)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-type", b"application/json"), *headers],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000)}
    incoming = [{"type": "http.request", "body": chunk, "more_body": i < len(chunks) - 1}
                for i, chunk in enumerate(chunks)]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await application(scope, receive, send)
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    return status, json.loads(b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body"))


COOKIE = (b"cookie", b"unrelated=1")  # through DRF, as in both()


@pytest.mark.parametrize("headers", [(), (COOKIE,)], ids=["fast", "drf"])
def test_a_body_sent_without_content_length_is_read(live_engine: Engine, headers: tuple[Any, ...]) -> None:
    # Both paths once took a body without Content-Length for an empty one: "type" is required.
    status, task = asyncio.run(post_chunked("/api/v1/tasks", [b'{"type": "dtq.echo", ', b'"payload": {"x": 1}}'],
                                            *headers))
    assert status == 201, task
    assert task["payload"] == {"x": 1} and waiting(live_engine) == 1


@pytest.mark.parametrize("headers", [(), (COOKIE,)], ids=["fast", "drf"])
def test_an_empty_body_without_content_length_is_an_empty_one_and_a_big_one_a_413(
        live_engine: Engine, settings: Any, headers: tuple[Any, ...]) -> None:
    status, answer = asyncio.run(post_chunked("/api/v1/tasks", [b""], *headers))
    assert status == 400 and list(answer["error"]["fields"]) == ["type"], answer  # as any empty body
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 1000  # the limit holds without a Content-Length to check
    body = json.dumps({"type": "dtq.echo", "payload": "x" * 1000}).encode()
    status, answer = asyncio.run(post_chunked("/api/v1/tasks", [body[:500], body[500:]], *headers))
    assert status == 413 and answer["error"]["code"] == "PAYLOAD_TOO_LARGE", answer
    assert waiting(live_engine) == 0


@pytest.fixture
def daphne(redis_server: Any, key_prefix: str, free_tcp_port: int) -> Iterator[int]:
    """dtq's site under daphne, as `make run` serves it, on this test's Redis and key prefix."""
    env = worker_env(redis_server.url, key_prefix, DJANGO_DEBUG="true")
    proc = subprocess.Popen([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(free_tcp_port),
                             "dtq_site.asgi:application"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", free_tcp_port), 0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline and proc.poll() is None, "daphne did not start"
                time.sleep(0.1)
        yield free_tcp_port
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_a_chunked_submit_over_http_is_read_both_ways(daphne: int) -> None:
    body = b'{"type": "dtq.echo", "payload": {"x": 1}}'
    for cookie in ({}, {"Cookie": "unrelated=1"}):
        conn = http.client.HTTPConnection("127.0.0.1", daphne, timeout=10)
        conn.putrequest("POST", "/api/v1/tasks")
        for name, value in {"Content-Type": "application/json", "Transfer-Encoding": "chunked", **cookie}.items():
            conn.putheader(name, value)
        conn.endheaders()
        conn.send(b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
        response = conn.getresponse()
        assert response.status == 201, (cookie, response.read())
        conn.close()
