"""The hot-path calls (dtq_core.wire): packing, one deadline per exchange, error replies handed
back in order, and a connection that comes back after a timeout or a script cache flush."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.keys import is_task_id
from dtq_core.submit import Submission
from dtq_core.wire import Line, exchange_pooled, pack


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


@pytest.mark.single_node  # one pool: a cluster's exchanges use one pool per master
def test_pooled_exchanges_keep_their_connection_and_reconnect_when_redis_closed_it(
        config: DtqConfig, key_prefix: str, redis_client: redis.Redis) -> None:
    client = redis.Redis.from_url(config.redis_url)
    pool = client.connection_pool
    name = f"{key_prefix}-kept"
    try:
        assert exchange_pooled(pool, [pack(["CLIENT", "SETNAME", name])]) == [b"OK"]
        ids = {exchange_pooled(pool, [pack(["CLIENT", "ID"])])[0] for _ in range(20)}
        assert len(ids) == 1  # kept between exchanges, not a connection each

        assert _kill_named(redis_client, name) == 1  # Redis closes it while it is kept
        # Its end of file is queued by the time CLIENT KILL answers (loopback): the exchange sees it
        # before sending and reconnects rather than failing.
        assert exchange_pooled(pool, [pack(["CLIENT", "ID"])])[0] not in ids

        pool.disconnect()  # closes the kept connections too: they count as in use to the pool
        assert [c for c in redis_client.client_list() if c.get("name") == name] == []
        assert exchange_pooled(pool, [pack(["PING"])]) == [b"PONG"]
    finally:
        client.close()


def test_a_placed_submission_keeps_every_field_but_its_id() -> None:
    s = Submission(type="t", payload_json="{}", queue="q", priority="low", delay_s=1.5, ttl_s=9.0, max_attempts=4,
                   timeout_s=3.0, idempotency_key="k", request_id="r", handler="django.task", task_id="old")
    placed = s.placed("a1")
    assert placed.task_id.startswith("a1-") and is_task_id(placed.task_id) and placed.task_id != s.task_id
    assert {f.name: getattr(placed, f.name) for f in dataclasses.fields(s) if f.name != "task_id"} == \
        {f.name: getattr(s, f.name) for f in dataclasses.fields(s) if f.name != "task_id"}
