"""The worker's hot-path line to Redis: one connection of its own, commands packed here and sent
together in one write, their replies read back in order.

redis-py's per-command path (pool checkout, retry wrapper, a task per timed write, a timeout
per read, repacking every argument) cost more worker CPU than the fetch and completion scripts
themselves; this line keeps the connection and one timeout per exchange, nothing else.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence
from typing import Any

import redis
import redis.asyncio as aioredis


def bulk(args: Iterable[object]) -> bytes:
    """The RESP bulk strings of args (str, bytes, int or float), without an array header."""
    out: list[bytes] = []
    for arg in args:
        if isinstance(arg, str):
            data = arg.encode()
        elif isinstance(arg, bytes):
            data = arg
        elif isinstance(arg, int) and not isinstance(arg, bool):
            data = b"%d" % arg
        elif isinstance(arg, float):
            data = repr(arg).encode()
        else:
            raise TypeError(f"cannot send {type(arg).__name__} to Redis: {arg!r}")
        out += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(out)


def command(*parts: tuple[int, bytes]) -> bytes:
    """One RESP command from (argument count, bulk()) parts, so constant parts are packed once."""
    return b"".join([b"*%d\r\n" % sum(count for count, _ in parts), *(data for _, data in parts)])


class Line:
    """A dedicated connection: exchange() sends commands in one write and reads every reply.

    The connection has no per-read timeout; each exchange runs under one deadline instead, and
    a connection left mid-exchange (timeout, error, cancellation) is closed, to reconnect on
    the next use.
    """

    def __init__(self, client: aioredis.Redis) -> None:
        pool = client.connection_pool
        self._conn = pool.connection_class(**{**pool.connection_kwargs, "socket_timeout": None})
        self._lock = asyncio.Lock()  # one exchange at a time, or replies would cross

    async def exchange(self, commands: Sequence[bytes], timeout_s: float) -> list[Any]:
        """Replies in order; an error reply comes back as its exception, not raised."""
        conn = self._conn
        replies: list[Any] = []
        try:
            async with self._lock, asyncio.timeout(timeout_s):
                await conn.send_packed_command(commands, check_health=False)
                for _ in commands:
                    try:
                        replies.append(await conn.read_response())
                    except redis.exceptions.ResponseError as exc:
                        replies.append(exc)
        except BaseException:
            await conn.disconnect(nowait=True)
            raise
        return replies

    async def close(self) -> None:
        await self._conn.disconnect()
