"""idempotent_operation: run a side effect at most once per key, hand later callers its result.

A marker in Redis (dtq:once:<key>) moves from "running" (a lease) to "done" with the JSON
result, kept for DTQ_IDEM_TTL_S. A caller that finds the lease held waits for the result; a
lease left by a crashed worker expires and the next caller runs fn again, which is why fn
itself should be safe to repeat after a crash between its effect and the marker write.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from dtq_core.engine import get_engine

T = TypeVar("T")
LEASE_S = 60.0  # default lease; pass lease_seconds to match how long fn may take
POLL_S = 0.05


def _key(key: str) -> str:
    if not isinstance(key, str) or not 0 < len(key) <= 500:
        raise ValueError("idempotent_operation key must be a string of 1-500 characters")
    return get_engine().keys.operation(key)


def _lease(lease_seconds: float | None) -> float:
    lease = LEASE_S if lease_seconds is None else lease_seconds
    if isinstance(lease, bool) or not isinstance(lease, (int, float)) or not 0 < lease <= 86400:
        raise ValueError("lease_seconds must be a number of seconds between 0 and 86400")
    return float(lease)


def _lookup(raw: str | None) -> tuple[bool, Any]:
    if raw is None:
        return False, None
    marker = json.loads(raw)
    return (True, marker["result"]) if "done" in marker else (False, None)


def _try_lease(redis_key: str, token: str, lease_s: float) -> bool:
    return bool(get_engine().client.set(redis_key, json.dumps({"running": token}), nx=True, px=int(lease_s * 1000)))


def _finish(redis_key: str, result: Any) -> None:
    engine = get_engine()
    engine.client.set(redis_key, json.dumps({"done": True, "result": result}, default=str),
                      px=engine.config.idem_ttl_s * 1000)


def _release(redis_key: str, token: str) -> None:
    client = get_engine().client
    if client.get(redis_key) == json.dumps({"running": token}):
        client.delete(redis_key)


def idempotent_operation(key: str, fn: Callable[[], T], *, lease_seconds: float | None = None) -> T:
    """Run fn at most once per key (within DTQ_IDEM_TTL_S); return the stored result to later callers.

    lease_seconds bounds how long a crashed caller's lease blocks the next one (default 60 s);
    keep it above fn's longest run, or a slow fn can be run twice.
    """
    lease_s = _lease(lease_seconds)
    redis_key = _key(key)
    client = get_engine().client
    token = uuid.uuid4().hex
    deadline = time.monotonic() + lease_s * 2
    while True:
        done, result = _lookup(client.get(redis_key))
        if done:
            return result  # type: ignore[no-any-return]
        if _try_lease(redis_key, token, lease_s):
            try:
                result = fn()
            except BaseException:
                _release(redis_key, token)
                raise
            _finish(redis_key, result)
            return result  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise TimeoutError(f"idempotent_operation {key!r} is held by another caller")
        time.sleep(POLL_S)


async def aidempotent_operation(key: str, fn: Callable[[], Awaitable[T]], *,
                                lease_seconds: float | None = None) -> T:
    """The async form of idempotent_operation, for async handlers."""
    lease_s = _lease(lease_seconds)
    redis_key = _key(key)
    client = get_engine().client
    token = uuid.uuid4().hex
    deadline = time.monotonic() + lease_s * 2
    while True:
        done, result = _lookup(await asyncio.to_thread(client.get, redis_key))
        if done:
            return result  # type: ignore[no-any-return]
        if await asyncio.to_thread(_try_lease, redis_key, token, lease_s):
            try:
                result = await fn()
            except BaseException:
                await asyncio.to_thread(_release, redis_key, token)
                raise
            await asyncio.to_thread(_finish, redis_key, result)
            return result  # type: ignore[no-any-return]
        if time.monotonic() > deadline:
            raise TimeoutError(f"idempotent_operation {key!r} is held by another caller")
        await asyncio.sleep(POLL_S)
