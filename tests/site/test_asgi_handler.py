"""The ASGI entry point (dtq_site.asgi): Django's handler with the middleware chain entered in one
thread hop and request threads reused. Requests still run side by side: one stuck on a silent
Redis does not hold up /health."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dtq_core.engine import Engine
from dtq_site.asgi import application


async def call(method: str, path: str, body: bytes = b"", headers: tuple[tuple[bytes, bytes], ...] = ()
               ) -> tuple[int, dict[bytes, bytes], bytes]:
    """One HTTP request straight into the ASGI application; (status, headers, body)."""
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
             "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "",
             "headers": [(b"host", b"127.0.0.1"), (b"content-length", str(len(body)).encode()), *headers],
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8000)}
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop()
        await asyncio.Event().wait()  # the client stays connected
        raise AssertionError("unreachable")

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await application(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    content = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], {k.lower(): v for k, v in start["headers"]}, content


def request_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("dtq-request"))


def test_a_submit_through_the_asgi_app(live_engine: Engine, redis_client: redis.Redis) -> None:
    body = json.dumps({"type": "dtq.echo", "payload": {"a": 1}, "queue": "asgi"}).encode()
    status, headers, content = asyncio.run(call("POST", "/api/v1/tasks", body, (
        (b"content-type", b"application/json"), (b"x-request-id", b"req-asgi-1"))))
    assert status == 201, content
    assert headers[b"x-request-id"] == b"req-asgi-1"
    task = json.loads(content)
    assert task["status"] == "QUEUED" and task["request_id"] == "req-asgi-1"
    assert redis_client.hget(live_engine.keys.task(task["id"]), "payload") == '{"a":1}'


def test_sequential_requests_reuse_a_request_thread(live_engine: Engine) -> None:
    async def twenty() -> list[int]:
        return [(await call("GET", "/health"))[0] for _ in range(20)]

    before = request_threads()
    assert asyncio.run(twenty()) == [200] * 20
    assert request_threads() <= before + 1


@pytest.fixture
def silent_redis(settings: Any) -> Iterator[None]:
    """A Redis URL whose server accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    settings.DTQ = {**settings.DTQ, "REDIS_URL": f"redis://127.0.0.1:{listener.getsockname()[1]}/0",
                    "REDIS_TIMEOUT_S": 1.5}
    yield
    listener.close()


def test_a_request_stuck_on_redis_does_not_hold_up_health(silent_redis: None) -> None:
    async def scenario() -> tuple[float, float, int, bytes]:
        started = time.monotonic()
        stuck = asyncio.create_task(call("GET", "/api/v1/queues"))
        await asyncio.sleep(0.2)  # the queues request is waiting on Redis by now
        health_status, _, _ = await call("GET", "/health")
        health_s = time.monotonic() - started
        assert not stuck.done() and health_status == 200
        status, _, content = await stuck
        return health_s, time.monotonic() - started, status, content

    health_s, stuck_s, status, content = asyncio.run(scenario())
    assert health_s < 1.0 < stuck_s  # /health answered while the other request still waited
    assert status == 503 and json.loads(content)["error"]["code"] == "REDIS_UNAVAILABLE"


def test_a_request_thread_still_busy_is_not_handed_to_the_next_request(live_engine: Engine) -> None:
    # A view abandoned by a cancelled request can still run on its thread: reuse waits for it.
    from dtq_site.handlers import RequestThread, SyncChainASGIHandler

    handler = SyncChainASGIHandler()
    busy, release = RequestThread(), threading.Event()
    busy.submit(release.wait)

    async def scenario() -> tuple[bool, bool]:
        handler._idle.clear()
        handler._recycle_when_idle(busy)
        recycled_while_busy = busy in handler._idle
        release.set()
        for _ in range(200):  # the thread hands it back as soon as it is idle
            if busy in handler._idle:
                break
            await asyncio.sleep(0.01)
        return recycled_while_busy, busy in handler._idle

    recycled_while_busy, recycled_after = asyncio.run(scenario())
    assert not recycled_while_busy and recycled_after
    busy.shutdown(wait=True)


def test_a_busy_request_thread_that_outlives_the_server_loop_ends_quietly(
        live_engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    # At shutdown the loop can close while an abandoned view still runs: when the view ends, its
    # thread is shut down instead of failing to hand itself back (a logged traceback before).
    from dtq_site.handlers import RequestThread, SyncChainASGIHandler

    handler = SyncChainASGIHandler()
    busy, release = RequestThread(), threading.Event()
    busy.submit(release.wait)

    async def scenario() -> None:
        handler._idle.clear()
        handler._recycle_when_idle(busy)

    asyncio.run(scenario())  # the loop is closed once this returns
    with caplog.at_level(logging.ERROR):
        release.set()
        busy.shutdown(wait=True)  # returns once the thread has run the release and its callback
    assert busy not in handler._idle
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text
    with pytest.raises(RuntimeError, match="shutdown"):
        busy.submit(print)


def test_request_signals_fire_once_on_the_request_thread(live_engine: Engine) -> None:
    # Django's request_started / request_finished receivers (closing DB connections among them)
    # run where the view runs, once each per request, now that they share its one thread hop.
    from django.core import signals

    seen: list[tuple[str, str]] = []

    def started(**_: Any) -> None:
        seen.append(("started", threading.current_thread().name))

    def finished(**_: Any) -> None:
        seen.append(("finished", threading.current_thread().name))

    signals.request_started.connect(started)
    signals.request_finished.connect(finished)
    try:
        status, _, _ = asyncio.run(call("GET", "/health"))
    finally:
        signals.request_started.disconnect(started)
        signals.request_finished.disconnect(finished)
    assert status == 200
    assert [what for what, _ in seen] == ["started", "finished"]
    assert all(thread.startswith("dtq-request") for _, thread in seen), seen
    assert seen[0][1] == seen[1][1]


@pytest.mark.parametrize("module", ["dtq_site.asgi", "dtq_site.wsgi"])
def test_the_served_application_keeps_its_start_up_heap_out_of_full_collections(module: str) -> None:
    # What daphne (or a WSGI server) loads: Django's, DRF's and the URLconf's objects are frozen,
    # so the collector's full passes walk only what requests make (docs/performance.md).
    probe = (f"import gc, {module}; frozen = gc.get_freeze_count(); "
             "junk = [[i] for i in range(1000)]; print(frozen, gc.get_freeze_count())")
    env = {**os.environ, "DJANGO_DEBUG": "true"}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    frozen, later = (int(n) for n in proc.stdout.split())
    assert frozen > 50_000  # the start-up heap: Django, DRF, Channels, the URLconf
    assert later == frozen  # what the process makes afterwards is collected as usual
