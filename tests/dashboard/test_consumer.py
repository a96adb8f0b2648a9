"""The /ws/events consumer with Channels' WebsocketCommunicator and a real Redis publisher:
one subscription per process, read policy, slow clients, drop counting, Redis trouble."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser, User
from django.urls import path

from dtq_core.engine import Engine
from dtq_dashboard import fanout
from dtq_dashboard.consumers import EventsConsumer
from dtq_dashboard.routing import websocket_urlpatterns
from tests.redis_server import RedisServer


def with_user(app: Any, user: Any) -> Callable[..., Awaitable[None]]:
    """Put a user in the scope the way AuthMiddlewareStack would (no session database needed)."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        return await app({**scope, "user": user}, receive, send)

    return wrapped


def communicator(user: Any = None, app: Any = None) -> WebsocketCommunicator:
    return WebsocketCommunicator(with_user(app or URLRouter(websocket_urlpatterns), user or AnonymousUser()),
                                 "/ws/events")


async def until(predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.01)


def subscribers(engine: Engine) -> int:
    return int(dict(engine.client.pubsub_numsub(engine.keys.events()))[engine.keys.events()])


def event(i: int, status: str = "RUNNING", etype: str = "task.started") -> str:
    return json.dumps({"event_id": f"9-{i}", "type": etype, "task_id": f"t{i}", "queue": "default",
                       "status": status, "attempt": 1, "ts": "2026-01-01T00:00:00.000Z"})


def test_it_forwards_real_task_events(live_engine: Engine) -> None:
    async def scenario() -> list[dict[str, Any]]:
        ws = communicator()
        connected, _ = await ws.connect()
        assert connected
        await until(lambda: subscribers(live_engine) == 1)
        task_id = await asyncio.to_thread(lambda: live_engine.tasks.enqueue("t.x", {"a": 1}).id)
        message = json.loads(await ws.receive_from(timeout=3))
        await ws.disconnect()
        return [message, {"task_id": task_id}]

    message, expected = asyncio.run(scenario())
    assert message["type"] == "task.queued" and message["task_id"] == expected["task_id"]
    assert set(message) == {"event_id", "type", "task_id", "queue", "status", "attempt", "ts"}


def test_the_socket_opens_only_once_the_subscription_is_live(live_engine: Engine) -> None:
    # A page shows "live" and re-reads state over REST when its socket opens: an event published
    # right after that must reach it (it did not while the handshake ran ahead of the SUBSCRIBE).
    async def scenario() -> tuple[int, dict[str, Any]]:
        ws = communicator()
        assert (await ws.connect())[0]
        listening = subscribers(live_engine)
        await asyncio.to_thread(live_engine.client.publish, live_engine.keys.events(), event(1))
        message = json.loads(await ws.receive_from(timeout=3))
        await ws.disconnect()
        return listening, message

    listening, message = asyncio.run(scenario())
    assert listening == 1
    assert message["event_id"] == "9-1"


def test_a_page_opened_after_the_last_one_closed_waits_for_the_new_subscription(live_engine: Engine) -> None:
    # The last page leaving drops the subscription; the next one must not be let in on the word
    # of the old one.
    async def scenario() -> list[int]:
        first = communicator()
        assert (await first.connect())[0]
        await first.disconnect()
        await until(lambda: subscribers(live_engine) == 0)
        second = communicator()
        assert (await second.connect())[0]
        listening = subscribers(live_engine)
        await asyncio.to_thread(live_engine.client.publish, live_engine.keys.events(), event(2))
        received = json.loads(await second.receive_from(timeout=3))["event_id"]
        await second.disconnect()
        return [listening, int(received.split("-")[1])]

    assert asyncio.run(scenario()) == [1, 2]


def test_one_subscription_per_process_however_many_clients(live_engine: Engine) -> None:
    async def scenario() -> None:
        clients = [communicator() for _ in range(5)]
        for ws in clients:
            assert (await ws.connect())[0]
        await until(lambda: subscribers(live_engine) == 1)
        await asyncio.to_thread(live_engine.client.publish, live_engine.keys.events(), event(1))
        for ws in clients:
            assert json.loads(await ws.receive_from(timeout=3))["event_id"] == "9-1"
        assert subscribers(live_engine) == 1
        for ws in clients:
            await ws.disconnect()
        await until(lambda: subscribers(live_engine) == 0)  # the last client leaving drops it

    asyncio.run(scenario())


def test_login_required_refuses_anonymous_sockets_and_admits_users(live_engine: Engine, settings: Any) -> None:
    settings.DTQ_CONSOLE_LOGIN_REQUIRED = True

    async def scenario() -> tuple[Any, bool]:
        anonymous = communicator()
        refused = await anonymous.connect()
        user = User(username="reader", is_active=True)
        member = communicator(user)
        accepted, _ = await member.connect()
        await member.disconnect()
        return refused, accepted

    (connected, code), accepted = asyncio.run(scenario())
    assert connected is False and code == 4403
    assert accepted


class SlowConsumer(EventsConsumer):
    """A client that reads nothing until the test opens the gate (a stuck browser or network)."""

    gate: asyncio.Event

    async def _pump(self) -> None:
        await type(self).gate.wait()
        await super()._pump()


def test_a_slow_client_drops_non_terminal_events_counts_them_and_keeps_every_terminal_one(
        live_engine: Engine) -> None:
    published_plain, published_terminal = 1500, 20

    async def scenario() -> dict[str, Any]:
        SlowConsumer.gate = asyncio.Event()
        ws = communicator(app=URLRouter([path("ws/events", SlowConsumer.as_asgi())]))
        assert (await ws.connect())[0]
        await until(lambda: subscribers(live_engine) == 1)
        hub = fanout.get_hub()
        buffer = next(iter(hub.clients))

        def publish() -> None:
            pipe = live_engine.client.pipeline(transaction=False)
            for i in range(published_plain):
                pipe.publish(live_engine.keys.events(), event(i))
                if i % 75 == 0 and i // 75 < published_terminal:
                    pipe.publish(live_engine.keys.events(), event(100000 + i, "SUCCEEDED", "task.succeeded"))
            pipe.execute()

        await asyncio.to_thread(publish)
        await until(lambda: hub.received_total == published_plain + published_terminal, timeout=10)
        assert len(buffer) == fanout.BUFFER_SIZE
        assert hub.dropped_total == published_plain + published_terminal - fanout.BUFFER_SIZE
        SlowConsumer.gate.set()
        received: list[dict[str, Any]] = []
        expected = published_plain + published_terminal - hub.dropped_total
        while sum(1 for m in received if not m["type"].startswith("feed.")) < expected:
            received.append(json.loads(await ws.receive_from(timeout=3)))
        assert await ws.receive_nothing(timeout=0.2)
        counter = live_engine.keys.global_stats_counters()
        await until(lambda: int(live_engine.client.hget(counter, "events_dropped") or 0) == hub.dropped_total,
                    timeout=5)
        dropped = hub.dropped_total
        await ws.disconnect()
        return {"received": received, "dropped": dropped}

    result = asyncio.run(scenario())
    events = [m for m in result["received"] if not m["type"].startswith("feed.")]
    notices = [m for m in result["received"] if m["type"] == "feed.dropped"]
    terminal = [m for m in events if m["status"] == "SUCCEEDED"]
    assert len(terminal) == published_terminal  # never dropped
    assert result["dropped"] > 0 and len(events) + result["dropped"] == published_plain + published_terminal
    assert sum(n["count"] for n in notices) == result["dropped"]  # the page is told, so it re-reads state
    assert len({m["event_id"] for m in events}) == len(events)


def test_redis_down_keeps_the_socket_open_and_says_so(settings: Any) -> None:
    # No redis fixture: the settings point at a dead port.
    async def scenario() -> tuple[dict[str, Any], float]:
        ws = communicator()
        started = asyncio.get_running_loop().time()
        assert (await ws.connect())[0]
        opened_after = asyncio.get_running_loop().time() - started
        message = json.loads(await ws.receive_from(timeout=5))
        await ws.disconnect()
        return message, opened_after

    message, opened_after = asyncio.run(scenario())
    assert message == {"type": "feed.status", "state": "disconnected"}
    assert opened_after < 2  # refused at once: the handshake does not wait out the subscribe timeout


def test_the_subscription_comes_back_after_a_redis_restart_and_asks_pages_to_resync(
        tmp_path: Path, settings: Any) -> None:
    server = RedisServer(tmp_path / "restart", appendonly=False).start()
    settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": "restart"}
    client = redis.Redis.from_url(server.url, decode_responses=True)

    async def scenario() -> list[str]:
        ws = communicator()
        assert (await ws.connect())[0]
        await until(lambda: client.pubsub_numsub("restart:events")[0][1] == 1)
        server.kill()
        seen = [json.loads(await ws.receive_from(timeout=5))["type"]]
        await asyncio.to_thread(server.start)
        seen.append(json.loads(await ws.receive_from(timeout=10))["type"])
        await asyncio.to_thread(client.publish, "restart:events", event(7))
        seen.append(json.loads(await ws.receive_from(timeout=5))["event_id"])
        await ws.disconnect()
        return seen

    try:
        assert asyncio.run(scenario()) == ["feed.status", "feed.resync", "9-7"]
    finally:
        server.stop()


def test_a_socket_to_any_other_path_is_refused_not_an_error() -> None:
    # Through the project's ASGI application: Channels' router used to raise (daphne: 500 and a
    # traceback in the log) for a path it has no route for.
    from dtq_site.asgi import application

    async def scenario(url: str) -> tuple[bool, Any]:
        socket = WebsocketCommunicator(application, url)
        return await socket.connect()

    for url in ("/ws/nope", "/", "/ws/events/extra"):
        connected, _ = asyncio.run(scenario(url))
        assert connected is False, url


def test_a_browser_socket_from_another_site_is_refused(live_engine: Engine, settings: Any) -> None:
    # Cross-site WebSocket hijacking: another site's page would read the feed with the console's
    # cookie. The Origin must be the host itself (an allowed host) or a trusted origin; a
    # handshake with no Origin is not a browser's.
    from dtq_site.asgi import application

    settings.CSRF_TRUSTED_ORIGINS = ["https://console.example", "https://*.ops.example"]

    async def scenario(headers: list[tuple[bytes, bytes]]) -> bool:
        socket = WebsocketCommunicator(application, "/ws/events", headers=headers)
        connected, _ = await socket.connect()
        if connected:
            await socket.disconnect()
        return connected

    host = (b"host", b"127.0.0.1:8000")
    cases = [([host, (b"origin", b"https://evil.example")], False),
             ([host, (b"origin", b"http://127.0.0.1:8001")], False),
             ([host, (b"origin", b"null")], False),
             ([host, (b"origin", b"http://[::1")], False),  # malformed: refused, not a traceback
             ([host, (b"origin", b"http://127.0.0.1:8000"), (b"origin", b"https://evil.example")], False),
             # DNS rebinding: the attacker's name resolves to this server, Host and Origin agree
             ([(b"host", b"evil.example:8000"), (b"origin", b"http://evil.example:8000")], False),
             ([host, (b"origin", b"http://127.0.0.1:8000")], True),
             ([(b"host", b"localhost:8000"), (b"origin", b"http://localhost:8000")], True),
             ([host, (b"origin", b"https://console.example")], True),
             ([host, (b"origin", b"https://a.ops.example")], True),
             ([host, (b"origin", b"http://a.ops.example")], False),
             ([host], True)]
    for headers, allowed in cases:
        assert asyncio.run(scenario(headers)) is allowed, headers
