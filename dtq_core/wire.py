"""Hot-path calls to Redis without redis-py's per-command path: commands packed by hiredis,
sent together in one write, their replies read back in order.

For the worker, a Line: a connection of its own. redis-py's asyncio path (pool checkout, retry
wrapper, a task per timed write, a timeout per read, repacking every argument) cost more
worker CPU than the fetch and completion scripts themselves; a Line keeps the connection and one
timeout per exchange. For the blocking client (submit), exchange_pooled on a pooled connection.

Both take their connections from the client's pool (its connection class and arguments), so with
a redis+sentinel:// URL they are Sentinel-managed: each connect asks the sentinels for the master.
When the sentinels replace the master (sentinel_watch.py), kept connections are shut down under
their pool, and a Line finds its master's `generation` moved at its next exchange: one integer
comparison, the only cost of this on the hot path (on any topology; it never moves off Sentinel).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Sequence
from typing import Any

import hiredis
import redis
import redis.asyncio as aioredis


def pack(args: Sequence[object]) -> bytes:
    """One RESP command from its arguments (str, bytes, int or float), packed by hiredis in C."""
    # hiredis's stub takes a 1-tuple (not a tuple of any length) and leaves the result untyped.
    packed: bytes = hiredis.pack_command(tuple(args))  # type: ignore[arg-type]
    return packed


class _Fixed:
    """The master of a Redis that no Sentinel moves (one node, a cluster node): its generation
    never changes."""

    generation = 0


FIXED = _Fixed()


class Line:
    """A dedicated connection: exchange() sends commands in one write and reads every reply.

    The connection has no per-read timeout; each exchange runs under one deadline instead, and
    a connection left mid-exchange (timeout, error, cancellation) is closed, to reconnect on
    the next use.
    """

    def __init__(self, client: aioredis.Redis | None = None, *, connection: Any = None) -> None:
        self._master: Any = FIXED
        if connection is None:
            assert client is not None
            pool = client.connection_pool
            connection = pool.connection_class(**{**pool.connection_kwargs, "socket_timeout": None})
            # Behind Sentinel, the watch of its master (sentinel_watch.MasterWatch).
            self._master = getattr(pool, "master_watch", FIXED)
        self._generation: int = self._master.generation  # the master's switches this Line has seen
        self._conn = connection
        self._lock = asyncio.Lock()  # one exchange at a time, or replies would cross

    @classmethod
    def to(cls, connection_class: Any, connection_kwargs: dict[str, Any]) -> Line:
        """A Line to one node of a cluster (its connection class and arguments, from redis-py)."""
        return cls(connection=connection_class(**{**connection_kwargs, "socket_timeout": None}))

    async def exchange(self, commands: Sequence[bytes], timeout_s: float) -> list[Any]:
        """Replies in order; an error reply comes back as its exception, not raised."""
        conn = self._conn
        replies: list[Any] = []
        async with self._lock:  # waiting for it is not part of the deadline
            try:
                async with asyncio.timeout(timeout_s):
                    if self._generation != self._master.generation:
                        # The sentinels replaced the master since this connected: the old one may
                        # still take writes, which it drops once it follows the new one.
                        self._generation = self._master.generation
                        await conn.disconnect()
                    if conn.is_connected and await _closed_or_dirty(conn):
                        await conn.disconnect()  # Redis restarted, or closed it idle: open a new one
                    if not conn.is_connected:
                        # connect() itself, not the plain socket connect that sending would make: a
                        # Sentinel-managed connection asks the sentinels for the master in it.
                        await conn.connect()
                    await conn.send_packed_command(commands, check_health=False)
                    for _ in commands:
                        try:
                            replies.append(await conn.read_response())
                        except redis.exceptions.ResponseError as exc:
                            replies.append(exc)
            except BaseException:
                await conn.disconnect(nowait=True)
                raise
            if _demoted(replies):
                await conn.disconnect()
        return replies

    async def close(self) -> None:
        await self._conn.disconnect()


async def _closed_or_dirty(conn: Any) -> bool:
    """The check redis-py's pool makes before lending a connection (no system call: the event
    loop has already seen an end of file or stray bytes)."""
    try:
        return bool(await conn.can_read())
    except (OSError, redis.exceptions.ConnectionError):
        return True


def _demoted(replies: list[Any]) -> bool:
    """A write answered READONLY: the connection reached a master that a failover demoted. It is
    dropped, so the next exchange connects anew and finds the new master (through Sentinel, or
    the URL's address once it follows the master). A Sentinel-managed connection drops itself
    and raises a ConnectionError instead."""
    return any(isinstance(reply, redis.exceptions.ReadOnlyError) for reply in replies)


KEEP_MAX = 32  # connections kept between exchanges per pool (beyond: back to the pool)


class _Kept:
    """Connections exchange_pooled took from a pool and keeps for its next exchanges.

    redis-py's checkout and release (a lock, pool events, connection-count metrics) cost more
    client CPU than packing and parsing a submit; a list pop and append are atomic under the
    GIL. To the pool they stay in use, so its disconnect() still closes them, and a Sentinel
    master switch shuts them down (sentinel_watch.py): they reconnect on their next exchange.
    After a fork the child starts a list of its own, as the pool does.
    """

    __slots__ = ("free", "pid")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.free: list[Any] = []


_KEPT: weakref.WeakKeyDictionary[Any, _Kept] = weakref.WeakKeyDictionary()


def _kept(pool: Any) -> _Kept:
    kept = _KEPT.get(pool)
    if kept is None or kept.pid != os.getpid():
        kept = _KEPT[pool] = _Kept()
    return kept


def _borrow(pool: Any, kept: _Kept) -> Any:
    try:
        conn = kept.free.pop()
    except IndexError:
        return pool.get_connection()  # connected and checked by the pool
    # The pool's checks before lending: connected (a disconnect() may have closed it), and
    # nothing to read (an end of file when Redis closed it idle or restarted, or stray bytes).
    try:
        if not conn.is_connected:
            # Not on every borrow: connect() goes through the retry wrapper even when connected.
            conn.connect()
        try:
            stale = conn.can_read()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
            stale = True  # it reads the end of file as an error
        if stale:
            conn.disconnect()
            conn.connect()
    except BaseException:
        pool.release(conn)
        raise
    return conn


def _give_back(pool: Any, kept: _Kept, conn: Any) -> None:
    if len(kept.free) < KEEP_MAX and kept.pid == os.getpid():
        kept.free.append(conn)
    else:
        pool.release(conn)


def exchange_pooled(pool: redis.ConnectionPool, commands: Sequence[bytes]) -> list[Any]:
    """The blocking client's counterpart of Line.exchange, on a connection of the pool's
    (request threads share them: see _Kept), under the connection's own socket timeout."""
    kept = _kept(pool)
    conn = _borrow(pool, kept)
    try:
        conn.send_packed_command(commands, check_health=False)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(conn.read_response())
            except redis.exceptions.ResponseError as exc:
                replies.append(exc)
        if _demoted(replies):
            conn.disconnect()
        return replies
    except BaseException:
        conn.disconnect()
        raise
    finally:
        _give_back(pool, kept, conn)
