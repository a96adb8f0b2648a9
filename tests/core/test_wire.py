"""The hot-path calls (dtq_core.wire): packing, one deadline per exchange, error replies handed
back in order, and a connection that comes back after a timeout or a script cache flush."""

from __future__ import annotations

import asyncio

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.wire import Line, pack


def test_packing_matches_the_redis_protocol() -> None:
    assert pack(["SET", "k", 1]) == b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\n1\r\n"
    with pytest.raises(TypeError):
        pack(["SET", "k", None])


def test_a_line_returns_error_replies_in_place_and_survives_its_deadline(config: DtqConfig,
                                                                         key_prefix: str) -> None:
    key, wait_key = f"{key_prefix}:n", f"{key_prefix}:never"

    async def scenario() -> tuple[list[object], list[object]]:
        client = async_client(config, read_timeout_s=5)
        line = Line(client)
        try:
            replies = await line.exchange([pack(["INCR", key]), pack(["EVALSHA", "0" * 40, 0]),
                                           pack(["INCR", key])], 2)
            # A BLPOP that outlives the deadline: the exchange fails, the connection is dropped...
            with pytest.raises(TimeoutError):
                await line.exchange([pack(["BLPOP", wait_key, 5])], 0.2)
            # ...and the next exchange reconnects, with no stale reply in between.
            after = await line.exchange([pack(["INCR", key])], 2)
            return replies, after
        finally:
            await line.close()
            await client.aclose()

    replies, after = asyncio.run(scenario())
    assert replies[0] == 1 and replies[2] == 2
    assert isinstance(replies[1], redis.exceptions.NoScriptError)
    assert after == [3]


def test_a_line_reconnects_when_redis_closed_its_idle_connection(config: DtqConfig, key_prefix: str,
                                                                   redis_client: redis.Redis) -> None:
    key = f"{key_prefix}:n"

    async def scenario() -> list[object]:
        client = async_client(config, read_timeout_s=5)
        line = Line(client)
        try:
            await line.exchange([pack(["CLIENT", "SETNAME", f"{key_prefix}-line"])], 2)
            assert _kill_named(redis_client, f"{key_prefix}-line") == 1
            await asyncio.sleep(0.1)  # the end of file reaches the event loop
            return await line.exchange([pack(["INCR", key])], 2)
        finally:
            await line.close()
            await client.aclose()

    assert asyncio.run(scenario()) == [1]


def _kill_named(redis_client: redis.Redis, name: str) -> int:
    ids = [c["id"] for c in redis_client.client_list() if c.get("name") == name]
    for client_id in ids:
        redis_client.client_kill_filter(_id=client_id)
    return len(ids)


def test_submit_reloads_its_script_after_a_flush_and_raises_connection_error_without_redis(
        engine: Engine, redis_client: redis.Redis) -> None:
    redis_client.script_flush()
    task_id = engine.tasks.enqueue("dtq.echo", record=False).id
    assert redis_client.hget(engine.keys.task(task_id), "status") == "QUEUED"

    # Nothing listens on port 1: the API maps this error to 503 REDIS_UNAVAILABLE.
    dead = Engine(DtqConfig(redis_url="redis://127.0.0.1:1/0", key_prefix=engine.keys.prefix))
    try:
        with pytest.raises(redis.exceptions.ConnectionError):
            dead.tasks.enqueue("dtq.echo", record=False)
    finally:
        dead.client.close()
