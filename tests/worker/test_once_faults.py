"""idempotent_operation under faults: Redis restarting right after fn's effect, and an async
caller cancelled while it takes the lease. Real redis-server processes and real clients."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import pytest
import redis

import dtq_tasks
from dtq_core.engine import Engine
from dtq_core.scripts import Scripts
from dtq_tasks import once
from tests.redis_server import RedisServer

from .support import AfterCall


@pytest.fixture
def own_redis(tmp_path: Path, settings: Any) -> Any:
    server = RedisServer(tmp_path / "redis").start()  # AOF on: a clean restart loses nothing
    settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": "once"}
    try:
        yield server
    finally:
        server.stop()


def test_a_redis_restart_right_after_the_effect_does_not_run_it_again(own_redis: RedisServer) -> None:
    # A card is charged; Redis restarts just as the "done" marker is to be written. The caller
    # holds the result and writes the marker once Redis is back, so the task's rerun (or any next
    # caller) gets the first receipt instead of charging again.
    charges: list[str] = []
    restarted = threading.Event()

    def restart_soon() -> None:
        own_redis.start()
        restarted.set()

    restart = threading.Timer(0.5, restart_soon)

    def charge_then_redis_restarts() -> str:
        charges.append("charged")
        own_redis.stop()
        restart.start()
        return "receipt-1"

    try:
        first = dtq_tasks.idempotent_operation("charge:42", charge_then_redis_restarts, lease_seconds=1)
    finally:
        if restart.is_alive():
            restart.join()  # before the fixture stops the server, or it would start it again after
    assert restarted.is_set()  # the marker was written after the restart, not before it
    second = dtq_tasks.idempotent_operation("charge:42", lambda: charges.append("again") or "receipt-2",
                                            lease_seconds=1)
    assert (first, second, charges) == ("receipt-1", "receipt-1", ["charged"])


def test_a_redis_away_longer_than_the_marker_retries_raises_its_error(
        own_redis: RedisServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(once, "FINISH_RETRY_S", 0.3)  # 30 s in production

    def charge_then_redis_stops() -> str:
        own_redis.stop()
        return "receipt-1"

    with pytest.raises(redis.ConnectionError):  # retryable: the task runs again, as after a crash
        dtq_tasks.idempotent_operation("charge:43", charge_then_redis_stops)


@pytest.mark.single_node  # a redis.Redis client in place of the engine's
def test_an_async_caller_cancelled_while_taking_the_lease_leaves_no_lease_behind(
        live_engine: Engine, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    key = live_engine.keys.operation("refund:9")
    # The caller's task is cancelled (as a task timeout or a cancel would) right after Redis answered
    # the SET that takes the lease, before the reply reaches the coroutine: one round trip's window.
    client = AfterCall(connection_pool=live_engine.client.connection_pool)
    monkeypatch.setattr(live_engine, "client", client)
    monkeypatch.setattr(live_engine, "scripts", Scripts(client))
    ran: list[str] = []

    async def refund() -> str:
        ran.append("refund")
        return "ok"

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        task = loop.create_task(dtq_tasks.aidempotent_operation("refund:9", refund, lease_seconds=30))
        client.key, client.command, client.then = key, "SET", lambda: loop.call_soon_threadsafe(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert ran == []  # the cancel came first: fn never ran ...
    assert redis_client.get(key) is None  # ... and the next caller need not wait out a 30 s lease
    assert asyncio.run(dtq_tasks.aidempotent_operation("refund:9", refund, lease_seconds=30)) == "ok"
    assert ran == ["refund"]
