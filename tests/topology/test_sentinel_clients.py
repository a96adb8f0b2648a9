"""Every client dtq makes on a redis+sentinel:// URL finds the master through the sentinels, and
after the master is SIGKILLed and a replica promoted, finds the new one by itself: the blocking
client (API, CLI), the asyncio client (worker, console fan-out) and the raw hot-path connections
of wire.py (the worker's Lines, submit's exchange_pooled). The first call after the failover may
fail; the next ones reach the new master, in the same process, with the same client objects."""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio.sentinel
import redis.sentinel

from dtq_core.config import DtqConfig
from dtq_core.connection import async_client, sync_client
from dtq_core.engine import Engine
from dtq_core.redis_errors import translate
from dtq_core.wire import Line, exchange_pooled, pack

from ..redis_server import RedisServer
from ..redis_topologies import SentinelProcess, SentinelSetup, free_ports, poll

T = TypeVar("T")
CONNECTION_TROUBLE = (redis.ConnectionError, redis.TimeoutError, ConnectionError, TimeoutError, OSError)
RECOVERY_S = 5.0  # after the promotion is visible, each client must reach the new master within this


def port_of(info: str | dict[str, Any]) -> int:
    """The tcp_port of INFO server, parsed by redis-py (a dict) or raw (the wire's text)."""
    if isinstance(info, dict):
        return int(info["tcp_port"])
    match = re.search(r"^tcp_port:(\d+)", info, re.MULTILINE)
    assert match is not None, info
    return int(match.group(1))


def until_it_works(call: Callable[[], T], what: str) -> tuple[T, int]:
    """Call until it succeeds (connection trouble is retried); return the result and the failures."""
    deadline, failures = time.monotonic() + RECOVERY_S, 0
    while True:
        try:
            return call(), failures
        except CONNECTION_TROUBLE:
            failures += 1
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not reach the new master within {RECOVERY_S}s") from None
            time.sleep(0.05)


async def until_it_works_async(call: Callable[[], Awaitable[T]], what: str) -> tuple[T, int]:
    deadline, failures = time.monotonic() + RECOVERY_S, 0
    while True:
        try:
            return await call(), failures
        except CONNECTION_TROUBLE:
            failures += 1
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} did not reach the new master within {RECOVERY_S}s") from None
            await asyncio.sleep(0.05)


def test_every_client_reaches_the_master_and_the_new_one_after_a_failover(fresh_sentinel: SentinelSetup) -> None:
    config = DtqConfig(redis_url=fresh_sentinel.url, key_prefix="dtqtest:sentinel")
    blocking = sync_client(config)
    write_info = [pack(["SET", "dtqtest:sentinel:k", "v"]), pack(["INFO", "server"])]

    def blocking_call() -> int:
        assert blocking.set("dtqtest:sentinel:k", "v")
        return port_of(blocking.info("server"))

    def pooled_call() -> int:
        ok, info = exchange_pooled(blocking.connection_pool, write_info)
        assert ok == "OK", ok
        return port_of(info)

    async def scenario() -> None:
        client = async_client(config, read_timeout_s=5.0)
        line = Line(client)

        async def async_call() -> int:
            assert await client.set("dtqtest:sentinel:k", "v")
            return port_of(await client.info("server"))

        async def line_call() -> int:
            ok, info = await line.exchange(write_info, 2.0)
            assert ok == "OK", ok
            return port_of(info)

        try:
            old = fresh_sentinel.master_port()
            assert blocking_call() == pooled_call() == await async_call() == await line_call() == old
            new = fresh_sentinel.kill_master(replicas=0).port
            assert new != old
            # Each connection to the old master is dead now: the next call fails or reconnects.
            for name, call in (("the blocking client", blocking_call), ("exchange_pooled", pooled_call)):
                port, failures = until_it_works(call, name)
                assert port == new, name
                assert failures <= 3, f"{name} failed {failures} times after the promotion"
            for name, acall in (("the asyncio client", async_call), ("a Line", line_call)):
                port, failures = await until_it_works_async(acall, name)
                assert port == new, name
                assert failures <= 3, f"{name} failed {failures} times after the promotion"
        finally:
            await line.close()
            await client.aclose()

    asyncio.run(scenario())
    # And the engine on its blocking client: the submit path (call_direct) and a read.
    engine = Engine(config)
    enqueued, _ = until_it_works(lambda: engine.tasks.enqueue("dtq.echo", {"n": 1}), "the engine")
    assert engine.tasks.get(enqueued.id)["status"] == "QUEUED"


def test_a_write_answered_readonly_drops_the_raw_connection_and_is_a_503(tmp_path: Any) -> None:
    # A plain redis:// URL whose server a failover demoted: the raw paths drop the connection (the
    # next exchange connects anew, to wherever the address now leads), and users read a 503.
    with RedisServer(tmp_path / "a", appendonly=False) as server, \
            RedisServer(tmp_path / "b", appendonly=False) as other:
        blocking = sync_client(DtqConfig(redis_url=server.url))
        first_id = exchange_pooled(blocking.connection_pool, [pack(["CLIENT", "ID"])])[0]
        redis.Redis(port=server.port).replicaof("127.0.0.1", other.port)
        reply = exchange_pooled(blocking.connection_pool, [pack(["SET", "k", "v"])])[0]
        assert isinstance(reply, redis.exceptions.ReadOnlyError)
        assert translate(reply) is not None and translate(reply).code == "REDIS_UNAVAILABLE"  # type: ignore[union-attr]
        assert exchange_pooled(blocking.connection_pool, [pack(["CLIENT", "ID"])])[0] != first_id

        async def line_drops_it() -> None:
            client = async_client(DtqConfig(redis_url=server.url), read_timeout_s=5.0)
            line = Line(client)
            try:
                (before,) = await line.exchange([pack(["CLIENT", "ID"])], 2.0)
                (refused,) = await line.exchange([pack(["SET", "k", "v"])], 2.0)
                assert isinstance(refused, redis.exceptions.ReadOnlyError)
                (after,) = await line.exchange([pack(["CLIENT", "ID"])], 2.0)
                assert after != before
            finally:
                await line.close()
                await client.aclose()

        asyncio.run(line_drops_it())


@pytest.mark.parametrize("db", [0, 3])
def test_the_url_database_is_the_one_used(sentinel_setup: SentinelSetup, db: int) -> None:
    client = sync_client(DtqConfig(redis_url=sentinel_setup.url_for(db)))
    client.set("dtqtest:sentinel:db", str(db))
    direct = redis.Redis(port=sentinel_setup.master_port(), db=db, decode_responses=True)
    assert direct.get("dtqtest:sentinel:db") == str(db)
    direct.delete("dtqtest:sentinel:db")


def test_no_master_found_names_the_service_and_every_sentinel_s_trouble(tmp_path: Any) -> None:
    # One address with no sentinel behind it, one sentinel that monitors nothing: both clients
    # (the blocking and the asyncio one share discover_master's choice) say which service was
    # asked for and what each sentinel answered, and users read a 503.
    gone, port = free_ports(2)
    sentinel = SentinelProcess(tmp_path / "sentinel", port, uuid.uuid4().hex + "0" * 8)  # ids are 40 hex digits
    sentinel.start([])
    try:
        poll(lambda: sentinel.client().ping(), timeout=10, what="the sentinel to answer")
        config = DtqConfig(redis_url=f"redis+sentinel://127.0.0.1:{gone},127.0.0.1:{port}/nope")
        with pytest.raises(redis.sentinel.MasterNotFoundError) as blocking:
            sync_client(config).ping()

        async def ping_async() -> None:
            client = async_client(config, read_timeout_s=2.0)
            try:
                await client.ping()
            finally:
                await client.aclose()

        with pytest.raises(redis.asyncio.sentinel.MasterNotFoundError) as asynchronous:
            asyncio.run(ping_async())
        for raised in (blocking, asynchronous):
            message = str(raised.value)
            assert message.startswith("No master found for 'nope' : ") and f"port={gone}" in message, message
            trouble = translate(raised.value)
            assert trouble is not None and trouble.code == "REDIS_UNAVAILABLE"
    finally:
        sentinel.stop()
