"""arq (asyncio; async functions only). BENCH_ARQ_MAX_JOBS / BENCH_ARQ_POLL_DELAY /
BENCH_ARQ_KEEP_RESULT set the knobs (arq's defaults: 10, 0.5 s, 3600 s)."""

from __future__ import annotations

import os
from typing import Any

from arq import create_pool
from arq.connections import ArqRedis, RedisSettings

from .body import PAD_ARGS
from .body import incr_async as _incr_async

SETTINGS = RedisSettings.from_dsn(os.environ["BENCH_REDIS_URL"])


async def incr_async(ctx: dict[str, Any], key: str, pad: str = "") -> None:
    await _incr_async(key)


class WorkerSettings:
    functions = [incr_async]
    redis_settings = SETTINGS
    max_jobs = int(os.environ.get("BENCH_ARQ_MAX_JOBS", "10"))
    poll_delay = float(os.environ.get("BENCH_ARQ_POLL_DELAY", "0.5"))
    keep_result = int(os.environ.get("BENCH_ARQ_KEEP_RESULT", "3600"))


_pool: ArqRedis | None = None


async def send(key: str, body: str) -> None:
    global _pool
    assert body == "async"
    if _pool is None:
        _pool = await create_pool(SETTINGS)
    await _pool.enqueue_job("incr_async", key, *PAD_ARGS)
