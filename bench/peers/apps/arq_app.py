"""arq (asyncio). WorkerSettings is arq's default; BestSettings is tuned for a no-op task."""

from __future__ import annotations

import os
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

URL = os.environ["BENCH_REDIS_URL"]
SETTINGS = RedisSettings.from_dsn(URL)


async def noop(ctx: dict[str, Any], key: str) -> None:
    await ctx["redis"].incr(key)


class WorkerSettings:
    functions = [noop]
    redis_settings = SETTINGS


class BestSettings:  # arq reads the class's own attributes only, so nothing is inherited
    functions = [noop]
    redis_settings = SETTINGS
    max_jobs = 100
    poll_delay = 0.01
    keep_result = 0


_pool: ArqRedis | None = None


async def send(key: str) -> None:
    global _pool
    if _pool is None:
        _pool = await create_pool(SETTINGS)
    await _pool.enqueue_job("noop", key)
