"""A stuck WebSocket client on a real daphne: its socket stops taking data, so events wait in the
client's bounded buffer (dropped and counted past 1000; terminal ones kept, up to the overflow
cap), not in an unbounded transport buffer of the server process."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_dashboard import fanout
from dtq_dashboard.consumers import CLOSE_TOO_SLOW
from tests.browser.server import ConsoleServer
from tests.conftest import wait_for
from tests.redis_server import RedisServer

from .ws_client import RawWebSocket

# Longer than autobahn's own 1 s wait for a close handshake, well within dtq's.
STUCK_AFTER_CLOSE_S = 2.0
PADDING = "x" * 1000  # about 1 KB per event, as a task event with a long queue name and ids would not be


@pytest.fixture
def server(redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    # Anonymous sockets need no user database: the server is not migrated.
    console = ConsoleServer(tmp_path, redis_server.url, key_prefix).start()
    yield console
    console.stop()


@pytest.fixture
def publisher(redis_server: RedisServer, key_prefix: str) -> Engine:
    return Engine(DtqConfig(redis_url=redis_server.url, key_prefix=key_prefix))


def event(i: int, terminal: bool = False, padding: str = PADDING) -> str:
    status, etype = ("SUCCEEDED", "task.succeeded") if terminal else ("RUNNING", "task.started")
    return json.dumps({"event_id": f"9-{i}", "type": etype, "task_id": f"t{i}", "queue": "default",
                       "status": status, "attempt": 1, "ts": "2026-01-01T00:00:00.000Z", "pad": padding})


def stuck_client(server: ConsoleServer, publisher: Engine) -> RawWebSocket:
    ws = RawWebSocket("127.0.0.1", server.port, "/ws/events", recv_buffer=4096)
    assert ws.status == 101
    wait_for(lambda: dict(publisher.client.pubsub_numsub(publisher.keys.events()))[publisher.keys.events()] == 1)
    return ws


def dropped_in_redis(publisher: Engine) -> int:
    return int(publisher.client.hget(publisher.keys.global_stats_counters(), "events_dropped") or 0)


def test_a_client_that_stops_reading_gets_its_events_dropped_and_counted_not_buffered_without_bound(
        server: ConsoleServer, publisher: Engine) -> None:
    plain, terminal_every = 6000, 200
    ws = stuck_client(server, publisher)
    pipe = publisher.client.pipeline(transaction=False)
    for i in range(plain):
        pipe.publish(publisher.keys.events(), event(i, terminal=i % terminal_every == 0))
    pipe.publish(publisher.keys.events(), event(plain, terminal=True))  # the last one reports every drop
    pipe.execute()
    terminal_sent = plain // terminal_every + 1
    # 6 MB were published to a client that reads nothing: most must be dropped in the server.
    wait_for(lambda: dropped_in_redis(publisher) > 0, timeout=20,
             message="no event was dropped: the server buffered everything for the stuck client")

    received, notices = [], []
    while not received or received[-1]["event_id"] != f"9-{plain}":
        message = json.loads(ws.recv_frame().data)
        (notices if message["type"] == "feed.dropped" else received).append(message)
    ws.close()

    terminal = [m for m in received if m["status"] == "SUCCEEDED"]
    assert [m["event_id"] for m in terminal] == [f"9-{i}" for i in range(0, plain + 1, terminal_every)]
    assert len(terminal) == terminal_sent  # never dropped
    dropped = sum(n["count"] for n in notices)
    assert dropped > plain // 2  # most of what the stuck client could not take
    assert len(received) + dropped == plain + 1  # every event either reached the client or was reported
    wait_for(lambda: dropped_in_redis(publisher) == dropped, timeout=5)  # and counted cluster-wide
    metrics = server_metrics(server)
    assert f"dtq_events_dropped_total {float(dropped)}" in metrics


def test_a_client_stuck_behind_more_terminal_events_than_the_overflow_cap_is_closed_with_4008(
        server: ConsoleServer, publisher: Engine) -> None:
    ws = stuck_client(server, publisher)
    published = fanout.TERMINAL_OVERFLOW + 5000  # the socket's own buffers hold about a thousand of these
    pipe = publisher.client.pipeline(transaction=False)
    for i in range(published):
        pipe.publish(publisher.keys.events(), event(i, terminal=True))
    pipe.execute()
    # It stays stuck past the server's decision (the time is the fault, not a wait for anything):
    # slow is not gone, so the close code still reaches it when it reads again.
    time.sleep(STUCK_AFTER_CLOSE_S)
    frames = 0
    while True:
        frame = ws.recv_frame()
        if frame.opcode == 8:
            break
        frames += 1
    ws.close()
    assert frame.close_code == CLOSE_TOO_SLOW
    assert frames < published  # it was cut off, not sent everything


def server_metrics(server: ConsoleServer) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{server.url}/metrics", timeout=5) as response:
        return response.read().decode()
