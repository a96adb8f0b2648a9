"""SAQ (asyncio) on Redis: async functions run on its loop, plain functions in its thread pool.
BENCH_SAQ_CONCURRENCY sets `concurrency` (SAQ's default: 10)."""

from __future__ import annotations

import os
from typing import Any

from saq import Queue

from .body import PAD, incr_async, incr_sync

queue = Queue.from_url(os.environ["BENCH_REDIS_URL"], name="bench")


async def incr_async_task(ctx: dict[str, Any], *, counter: str, pad: str = "") -> None:
    await incr_async(counter)


def incr_sync_task(ctx: dict[str, Any], *, counter: str, pad: str = "") -> None:
    incr_sync(counter)


settings = {"queue": queue, "functions": [("incr_async", incr_async_task), ("incr_sync", incr_sync_task)],
            "concurrency": int(os.environ.get("BENCH_SAQ_CONCURRENCY", "10"))}
_connected = False
PAD_KWARGS: dict[str, str] = {"pad": PAD} if PAD else {}  # SAQ passes keyword arguments only


async def send(key: str, body: str) -> None:
    global _connected
    if not _connected:
        await queue.connect()
        _connected = True
    await queue.enqueue(f"incr_{body}", counter=key, **PAD_KWARGS)  # "key" is SAQ's job key
