"""SAQ (asyncio) on Redis. `settings` is SAQ's default concurrency (10); `best` raises it."""

from __future__ import annotations

import os
from typing import Any

import redis.asyncio as aioredis
from saq import Queue

URL = os.environ["BENCH_REDIS_URL"]
queue = Queue.from_url(URL, name="bench")
_r: aioredis.Redis | None = None


async def noop(ctx: dict[str, Any], *, counter: str) -> None:
    global _r
    if _r is None:
        _r = aioredis.Redis.from_url(URL, max_connections=200, socket_timeout=None)  # as bench/tasks.py
    await _r.incr(counter)


settings = {"queue": queue, "functions": [noop]}
best = {"queue": queue, "functions": [noop], "concurrency": 100}
_connected = False


async def send(key: str) -> None:
    global _connected
    if not _connected:
        await queue.connect()
        _connected = True
    await queue.enqueue("noop", counter=key)  # "key" is SAQ's job key
