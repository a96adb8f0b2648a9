"""taskiq with taskiq-redis's ListQueueBroker (LPUSH/BRPOP)."""

from __future__ import annotations

import os

import redis.asyncio as aioredis
from taskiq_redis import ListQueueBroker

URL = os.environ["BENCH_REDIS_URL"]
broker = ListQueueBroker(URL, queue_name="bench")
_r: aioredis.Redis | None = None


@broker.task(task_name="noop")
async def noop(key: str) -> None:
    global _r
    if _r is None:
        _r = aioredis.Redis.from_url(URL, max_connections=200, socket_timeout=None)  # as bench/tasks.py
    await _r.incr(key)


_started = False


async def send(key: str) -> None:
    global _started
    if not _started:
        await broker.startup()
        _started = True
    await noop.kiq(key)
