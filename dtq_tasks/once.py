"""idempotent_operation: run a side effect at most once per key, hand later callers its result.

A marker in Redis (dtq:once:<key>) moves from "running" (a lease) to "done" with the JSON
result, kept for DTQ_IDEM_TTL_S. A caller that finds the lease held waits for the result; a
lease left by a crashed worker expires and the next caller runs fn again, which is why fn
itself should be safe to repeat after a crash between its effect and the marker write.

Every caller, the one that ran fn included, gets the result as stored (dtq_core.codec's
encode_result, read back): a handler then sees the same value on its first run as on a rerun.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import RedisError

from dtq_core import redis_errors
from dtq_core.codec import encode_result
from dtq_core.conf import get_engine

LEASE_S = 60.0  # default lease; pass lease_seconds to match how long fn may take
POLL_S = 0.05
# fn's effect happened and its result is in hand: the marker write is tried again for this long
# (a Redis restart or failover), since once the lease expires the next caller would run fn again.
FINISH_RETRY_S = 30.0
FINISH_BACKOFF_S = (0.05, 1.0)  # first wait, longest wait


def _key(key: str) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= 500:
        raise ValueError("idempotent_operation key must be a string of 1-500 characters")
    return get_engine().keys.operation(key)


def _lease(lease_seconds: float | None) -> float:
    lease = LEASE_S if lease_seconds is None else lease_seconds
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 0 < lease <= 86400:
        raise ValueError("lease_seconds must be a number of seconds between 0 and 86400")
    return float(lease)


def _lookup(raw: bytes | str | None) -> tuple[bool, Any]:
    if raw is None:
        return False, None
    marker = json.loads(raw)
    return (True, marker["result"]) if "done" in marker else (False, None)


def _try_lease(redis_key: str, token: str, lease_s: float) -> bool:
    # At least 1 ms: a lease under a millisecond is in range, and SET ... PX 0 is an error.
    px = max(1, int(lease_s * 1000))
    return bool(get_engine().client.set(redis_key, json.dumps({"running": token}), nx=True, px=px))


def _finish(redis_key: str, result: Any) -> Any:
    """Mark the key done; return the result as later callers will read it. A write Redis does
    not answer (restarting, failing over, unreachable) is tried again for up to FINISH_RETRY_S;
    past that the Redis error is raised, and a rerun of the task may run fn again."""
    engine = get_engine()
    # encode_result never raises: fn's effect happened, and a marker left "running" would let
    # the next caller run fn again once the lease expires.
    encoded = encode_result(result)
    deadline = time.monotonic() + FINISH_RETRY_S
    wait, longest = FINISH_BACKOFF_S
    while True:
        try:
            engine.client.set(redis_key, f'{{"done":true,"result":{encoded}}}', px=engine.config.idem_ttl_s * 1000)
            return json.loads(encoded)
        except RedisError as exc:
            if not _transient(exc) or time.monotonic() + wait > deadline:
                raise
        time.sleep(wait)
        wait = min(wait * 2, longest)


def _transient(exc: RedisError) -> bool:
    """Redis is away for now (a restart, a failover, a full disk), not refusing dtq's user."""
    trouble = redis_errors.translate(exc)
    return trouble is not None and trouble.kind in (redis_errors.UNREACHABLE, redis_errors.LOADING,
                                                    redis_errors.WRITE_REFUSED)


def _release(redis_key: str, token: str) -> None:
    """Drop our lease, atomically only if it is still ours: it may have expired while fn ran and
    been taken by the next caller, whose lease must stay."""
    engine = get_engine()
    engine.scripts("releaseLock", keys=[redis_key], args=[json.dumps({"running": token})])


def idempotent_operation(key: str, fn: Callable[[], Any], *, lease_seconds: float | None = None) -> Any:
    """Run fn at most once per key (within DTQ_IDEM_TTL_S); return its result as stored (JSON).

    A result JSON cannot hold is stored through str() (see encode_result). lease_seconds bounds
    how long a crashed caller's lease blocks the next one (default 60 s); keep it above fn's
    longest run, or a slow fn can be run twice.
    """
    lease_s = _lease(lease_seconds)
    redis_key = _key(key)
    client = get_engine().client
    token = uuid.uuid4().hex
    deadline = time.monotonic() + lease_s * 2
    while True:
        done, result = _lookup(client.get(redis_key))
        if done:
            return result
        if _try_lease(redis_key, token, lease_s):
            try:
                result = fn()
            except BaseException:
                _release(redis_key, token)
                raise
            return _finish(redis_key, result)
        if time.monotonic() > deadline:
            raise TimeoutError(f"idempotent_operation {key!r} is held by another caller")
        time.sleep(POLL_S)


async def aidempotent_operation(key: str, fn: Callable[[], Awaitable[Any]], *,
                                lease_seconds: float | None = None) -> Any:
    """The async form of idempotent_operation, for async handlers."""
    lease_s = _lease(lease_seconds)
    redis_key = _key(key)
    client = get_engine().client
    token = uuid.uuid4().hex
    deadline = time.monotonic() + lease_s * 2
    while True:
        done, result = _lookup(await asyncio.to_thread(client.get, redis_key))
        if done:
            return result
        if await _atry_lease(redis_key, token, lease_s):
            try:
                result = await fn()
            except BaseException:
                await asyncio.to_thread(_release, redis_key, token)
                raise
            return await asyncio.to_thread(_finish, redis_key, result)
        if time.monotonic() > deadline:
            raise TimeoutError(f"idempotent_operation {key!r} is held by another caller")
        await asyncio.sleep(POLL_S)


async def _atry_lease(redis_key: str, token: str, lease_s: float) -> bool:
    """_try_lease in a thread. A caller cancelled meanwhile (a task's timeout or cancel) cannot
    stop the thread's SET, which may still take the lease: it is waited for and, if taken,
    released before the cancellation goes on, or every next caller would wait out the lease."""
    attempt = asyncio.ensure_future(asyncio.to_thread(_try_lease, redis_key, token, lease_s))
    try:
        return await asyncio.shield(attempt)
    except asyncio.CancelledError:
        try:
            if await attempt:
                await asyncio.to_thread(_release, redis_key, token)
        except Exception:  # noqa: BLE001 - the lease then expires as a crashed caller's does
            pass
        raise
