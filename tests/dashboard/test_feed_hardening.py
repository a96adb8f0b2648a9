"""The live feed against hostile input and stale access: junk on the events channel, a page that
opens while Redis is down, a client that floods pings and never reads, and a user whose access
ends while the socket is open (DTQ_CONSOLE_LOGIN_REQUIRED)."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from channels.routing import URLRouter
from django.contrib.auth.models import User
from django.db import OperationalError
from django.urls import path

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_dashboard import consumers, fanout
from dtq_dashboard.consumers import ACCESS_FRESH_S, ACCESS_IDLE_RECHECK_S, CLOSE_CHECK_FAILED, CLOSE_FORBIDDEN
from dtq_dashboard.fanout import is_terminal, parse_event
from tests.browser.server import ROOT, ConsoleServer
from tests.conftest import wait_for
from tests.redis_server import RedisServer

from .test_consumer import SlowConsumer, communicator, event, subscribers, until
from .ws_client import Frame, RawWebSocket

TERMINAL = event(1, "SUCCEEDED", "task.succeeded")


class CountingSlowConsumer(SlowConsumer):
    """A client that reads nothing until the gate opens; counts the frames the consumer handled."""

    handled = 0

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        await super().receive(text_data, bytes_data)
        type(self).handled += 1


async def read_until(ws: Any, last_type: str, timeout: float = 4.0) -> list[dict[str, Any]]:
    """Every message up to the first of type `last_type`, or all that came before the deadline."""
    deadline, got = asyncio.get_running_loop().time() + timeout, []
    while not got or got[-1].get("type") != last_type:
        try:
            got.append(json.loads(await ws.receive_from(timeout=deadline - asyncio.get_running_loop().time())))
        except TimeoutError:
            break
    return got


def published_after(live_engine: Engine, bad: list[bytes]) -> list[dict[str, Any]]:
    """Publish the bad messages then a terminal event; return what an open page got."""

    async def scenario() -> list[dict[str, Any]]:
        ws = communicator()
        assert (await ws.connect())[0]
        await until(lambda: subscribers(live_engine) == 1)
        for message in [*bad, TERMINAL.encode()]:
            await asyncio.to_thread(live_engine.client.publish, live_engine.keys.events(), message)
        got = await read_until(ws, "task.succeeded")
        await ws.disconnect()
        return got

    return asyncio.run(scenario())


# Junk on the events channel: skipped alone, the subscription stays


def test_a_message_that_is_not_utf8_is_skipped_and_the_subscription_stays(
        live_engine: Engine, caplog: pytest.LogCaptureFixture) -> None:
    # It should cost that message alone: it used to raise out of redis-py's decoding, the hub took
    # it for Redis trouble, told every page "disconnected", resubscribed and lost the next event.
    caplog.set_level(logging.WARNING, logger="dtq_dashboard.fanout")
    got = published_after(live_engine, [b"\xff\xfe not json", b"\xc3("])
    assert got == [json.loads(TERMINAL)]
    skipped = [r for r in caplog.records if "no event" in r.getMessage()]
    assert len(skipped) == 1, [r.getMessage() for r in caplog.records]  # logged once, not per message



@pytest.mark.parametrize("status", [["SUCCEEDED"], {"SUCCEEDED": 1}])
def test_a_status_that_is_not_a_string_is_never_terminal(status: Any) -> None:
    assert is_terminal({"type": "task.succeeded", "status": status}) is False


@pytest.mark.parametrize("raw", [
    b"\xff\xfe", b"not json", b"[1, 2]", b'"SUCCEEDED"', b"null", b"{}", b'{"type": 5}',
    b'{"type": "task.succeeded", "status": ["SUCCEEDED"]}', b'{"type": "task.failed", "status": {"a": 1}}',
    b"[" * 100_000,
])
def test_a_message_that_is_no_event_is_not_parsed_as_one(raw: bytes) -> None:
    assert parse_event(raw) is None


def test_events_with_odd_fields_are_skipped_and_the_subscription_stays(live_engine: Engine) -> None:
    bad = [json.dumps({"type": "task.succeeded", "status": ["SUCCEEDED"], "task_id": "x"}).encode(),
           json.dumps({"type": "task.failed", "status": {"FAILED": 1}}).encode(), b"[1]", b"null"]
    assert published_after(live_engine, bad) == [json.loads(TERMINAL)]


def test_a_message_that_trips_a_bug_in_dispatch_costs_that_message_alone(
        live_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    # Whatever goes wrong handling one message must not take the subscription down.
    real = fanout.parse_event

    def parse_or_fail(raw: str | bytes) -> tuple[str, bool] | None:
        if "boom" in str(raw):
            raise RuntimeError("a bug")
        return real(raw)

    monkeypatch.setattr(fanout, "parse_event", parse_or_fail)
    assert published_after(live_engine, [json.dumps({"type": "task.started", "task_id": "boom"}).encode()]) == [
        json.loads(TERMINAL)]


# A page that opens while Redis is down


def test_a_page_that_opens_while_redis_is_down_is_told_so_at_once(settings: Any) -> None:
    # No redis fixture: the settings point at a dead port (as tests/dashboard/test_consumer.py).
    # The second page joins a hub that already said "disconnected"; it used to hear nothing and
    # show "live" while nothing could arrive.
    async def scenario() -> tuple[dict[str, Any], dict[str, Any]]:
        first = communicator()
        assert (await first.connect())[0]
        first_told = json.loads(await first.receive_from(timeout=5))
        second = communicator()
        assert (await second.connect())[0]
        second_told = json.loads(await second.receive_from(timeout=1))
        await second.disconnect()
        await first.disconnect()
        return first_told, second_told

    first_told, second_told = asyncio.run(scenario())
    assert first_told == second_told == {"type": "feed.status", "state": "disconnected"}


# Pings from a client that does not read


def test_pings_from_a_client_that_does_not_read_are_answered_with_one_pong(live_engine: Engine) -> None:
    async def scenario() -> list[dict[str, Any]]:
        CountingSlowConsumer.gate, CountingSlowConsumer.handled = asyncio.Event(), 0
        ws = communicator(app=URLRouter([path("ws/events", CountingSlowConsumer.as_asgi())]))
        assert (await ws.connect())[0]
        for _ in range(50):
            await ws.send_to(text_data="ping")
        await until(lambda: CountingSlowConsumer.handled == 50)
        CountingSlowConsumer.gate.set()  # the client reads again
        got = [json.loads(await ws.receive_from(timeout=3))]
        assert await ws.receive_nothing(timeout=0.3)
        await ws.send_to(text_data="ping")  # a later ping, read promptly, gets its own pong
        got.append(json.loads(await ws.receive_from(timeout=3)))
        await ws.disconnect()
        return got

    assert asyncio.run(scenario()) == [{"type": "feed.pong"}, {"type": "feed.pong"}]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def ping_frames(count: int) -> bytes:
    mask = os.urandom(4)
    return (bytes([0x81, 0x80 | 4]) + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(b"ping"))) * count


@pytest.fixture
def console(redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    server = ConsoleServer(tmp_path, redis_server.url, key_prefix).start()  # anonymous: not migrated
    yield server
    server.stop()


def test_a_client_that_floods_pings_and_never_reads_costs_daphne_little(
        console: ConsoleServer, redis_server: RedisServer, key_prefix: str) -> None:
    # daphne used to hold a pong for every ping, and it queues every frame it reads for the
    # consumer, parsing them far faster than they are handled: 1M pings grew it by 252 MB. The
    # limit is docs/console.md's: a stuck client costs its buffer, 64 KiB and kernel buffers.
    limit_mb, watch_s = 32, 10.0
    channel = f"{key_prefix}:events"
    publisher = redis.Redis.from_url(redis_server.url)
    assert console.proc is not None
    pid = console.proc.pid
    ws = RawWebSocket("127.0.0.1", console.port, "/ws/events", recv_buffer=4096)
    assert ws.status == 101
    wait_for(lambda: dict(publisher.pubsub_numsub(channel))[channel.encode()] == 1)
    before, grown = rss_mb(pid), [0.0]
    ws.sock.settimeout(60)
    ws.sock.sendall(ping_frames(300_000))  # ~3 MB; the client never reads a byte
    # Without the fix it passes the limit within a few seconds; the server handles about a
    # thousand frames a second, so this watches the first several thousand pings.
    deadline = time.monotonic() + watch_s
    while time.monotonic() < deadline and grown[-1] <= limit_mb:
        grown.append(rss_mb(pid) - before)
        time.sleep(0.1)  # the sampling interval of a watch with a deadline
    ws.close()
    assert max(grown) <= limit_mb, f"daphne grew by {max(grown):.0f} MB for a client that never reads"


# Access that ends while the socket is open (DTQ_CONSOLE_LOGIN_REQUIRED)

SESSION_SCRIPT = """
from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
user = User.objects.create_user({username!r}, password="x")
session = SessionStore()
session[SESSION_KEY] = str(user.pk)
session[BACKEND_SESSION_KEY] = "django.contrib.auth.backends.ModelBackend"
session[HASH_SESSION_KEY] = user.get_session_auth_hash()
session.create()
print(session.session_key)
"""


@pytest.fixture(scope="module")
def private_console(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory
                    ) -> Iterator[ConsoleServer]:
    prefix = f"dtqtest:{uuid4().hex[:12]}"
    server = ConsoleServer(tmp_path_factory.mktemp("private"), redis_server.url, prefix,
                           DTQ_CONSOLE_LOGIN_REQUIRED="true")
    server.prepare()
    server.start()
    yield server
    server.stop()
    client = redis.Redis.from_url(redis_server.url)
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.unlink(key)


class Reader:
    """A logged-in user of the private console, with its own user row and session."""

    def __init__(self, server: ConsoleServer) -> None:
        self.server = server
        self.username = f"reader-{uuid4().hex[:8]}"
        self.session_key = subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", SESSION_SCRIPT.format(username=self.username)],
            cwd=ROOT, env=server.env, check=True, capture_output=True, timeout=60, text=True,
        ).stdout.strip().splitlines()[-1]

    def open_feed(self) -> RawWebSocket:
        ws = RawWebSocket.__new__(RawWebSocket)
        ws.sock = socket.create_connection(("127.0.0.1", self.server.port), timeout=10)
        key = base64.b64encode(os.urandom(16)).decode()
        ws.sock.sendall((f"GET /ws/events HTTP/1.1\r\nHost: 127.0.0.1:{self.server.port}\r\n"
                         f"Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                         f"Sec-WebSocket-Version: 13\r\nCookie: sessionid={self.session_key}\r\n\r\n").encode())
        ws._buf = b""
        ws.status = int(ws._read_until(b"\r\n\r\n").split(b" ", 2)[1])
        assert ws.status == 101, self.server.log()[-1500:]  # an active, logged-in user reads the feed
        return ws

    def _write(self, sql: str, *args: str) -> None:
        with sqlite3.connect(self.server.directory / "db.sqlite3", timeout=10) as db:
            db.execute(sql, args)

    def deactivate(self) -> None:
        """An admin deactivates the account: it can no longer load a page."""
        self._write("UPDATE auth_user SET is_active = 0 WHERE username = ?", self.username)

    def log_out(self) -> None:
        """The session ends (logout, or an admin clearing sessions)."""
        self._write("DELETE FROM django_session WHERE session_key = ?", self.session_key)


def frames_until_closed(ws: RawWebSocket, timeout: float) -> list[Frame]:
    """Every frame up to and with the close frame; fails past the deadline."""
    frames: list[Frame] = []
    deadline = time.monotonic() + timeout
    while not frames or frames[-1].opcode != 8:
        ws.sock.settimeout(max(deadline - time.monotonic(), 0.01))
        try:
            frames.append(ws.recv_frame())
        except TimeoutError:
            raise AssertionError(f"not closed within {timeout}s; got {len(frames)} frames: {frames[:2]}") from None
    return frames


def feed_publisher(redis_server: RedisServer, server: ConsoleServer) -> Engine:
    engine = Engine(DtqConfig(redis_url=redis_server.url, key_prefix=server.env["DTQ_KEY_PREFIX"]))
    wait_for(lambda: dict(engine.client.pubsub_numsub(engine.keys.events()))[engine.keys.events()] >= 1)
    return engine


def secret_event(i: int) -> str:
    return json.dumps({"event_id": f"9-{i}", "type": "task.succeeded", "task_id": f"secret{i}",
                       "queue": "payroll", "status": "SUCCEEDED", "attempt": 1, "ts": "2026-01-01T00:00:00.000Z"})


def test_a_user_deactivated_after_the_socket_opened_gets_no_event(
        private_console: ConsoleServer, redis_server: RedisServer) -> None:
    # It should be closed with the refusal code, not keep reading the feed on its open socket:
    # the first send checks the session and the user afresh.
    reader = Reader(private_console)
    ws = reader.open_feed()
    publisher = feed_publisher(redis_server, private_console)
    reader.deactivate()
    publisher.client.publish(publisher.keys.events(), secret_event(1))
    frames = frames_until_closed(ws, timeout=ACCESS_IDLE_RECHECK_S + 5)
    ws.close()
    assert [f.opcode for f in frames] == [8] and frames[0].close_code == CLOSE_FORBIDDEN, frames


def test_a_logged_out_session_is_closed_out_even_when_no_event_flows(
        private_console: ConsoleServer, redis_server: RedisServer) -> None:
    reader = Reader(private_console)
    ws = reader.open_feed()
    feed_publisher(redis_server, private_console)
    logged_out = time.monotonic()
    reader.log_out()
    frames = frames_until_closed(ws, timeout=ACCESS_IDLE_RECHECK_S + 5)
    ws.close()
    assert [f.close_code for f in frames] == [CLOSE_FORBIDDEN]
    assert time.monotonic() - logged_out < ACCESS_IDLE_RECHECK_S + 3  # the quiet socket's re-check


def test_while_events_flow_no_event_goes_out_on_a_check_older_than_a_second(
        private_console: ConsoleServer, redis_server: RedisServer) -> None:
    reader = Reader(private_console)
    ws = reader.open_feed()
    publisher = feed_publisher(redis_server, private_console)
    published_at: dict[str, float] = {}
    stop = threading.Event()

    def publish() -> None:
        i = 0
        while not stop.wait(0.02):
            i += 1
            published_at[f"9-{i}"] = time.monotonic()
            publisher.client.publish(publisher.keys.events(), secret_event(i))

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    try:
        # Several re-checks pass while the user is active: the feed goes on.
        opened, received = time.monotonic(), list[str]()
        while not received or published_at[received[-1]] < opened + 3 * ACCESS_FRESH_S:
            received.append(json.loads(ws.recv_frame().data)["event_id"])
        reader.deactivate()
        deactivated = time.monotonic()
        frames = frames_until_closed(ws, timeout=ACCESS_FRESH_S + 5)
    finally:
        stop.set()
        thread.join(5)
        ws.close()
    assert frames[-1].close_code == CLOSE_FORBIDDEN
    late = [json.loads(f.data)["event_id"] for f in frames[:-1]
            if published_at[json.loads(f.data)["event_id"]] > deactivated + ACCESS_FRESH_S]
    assert late == [], "events published more than a second after the user was deactivated went out"


def test_a_check_that_cannot_reach_the_database_closes_for_a_reconnect(
        live_engine: Engine, settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    # Nothing goes out unchecked, and the page is not told to log in (4403 stops its reconnects).
    settings.DTQ_CONSOLE_LOGIN_REQUIRED = True

    async def unreachable(scope: dict[str, Any]) -> bool:
        raise OperationalError("the database is down")

    monkeypatch.setattr(consumers, "still_allowed", unreachable)

    async def scenario() -> dict[str, Any]:
        ws = communicator(User(username="reader", is_active=True))
        assert (await ws.connect())[0]
        await until(lambda: subscribers(live_engine) == 1)
        await asyncio.to_thread(live_engine.client.publish, live_engine.keys.events(), secret_event(1))
        return dict(await ws.receive_output(timeout=3))

    assert asyncio.run(scenario()) == {"type": "websocket.close", "code": CLOSE_CHECK_FAILED}
