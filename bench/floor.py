"""The latency floor of the stack dtq's worker is built on, measured like dtq itself.

    python -m bench.floor REDIS_URL LIST_KEY COUNTER_KEY (async|sync)

runs a bare worker with no task record at all: BLPOP on a list, then the same body as the
benchmark task (one INCR of the counter). `async` uses redis-py's asyncio client on an event
loop, as dtq's worker does; `sync` uses the blocking client in one thread, as Huey's worker
does. dtq_bench.latency_floor pushes to the list and times the body's INCR through the same
keyspace notification as every other latency figure, so the gap between this floor and dtq is
what dtq's own work (task record, claim, events) costs, and the floor itself is what no worker
on this stack and machine can beat.
"""

from __future__ import annotations

import asyncio
import sys

import redis
import redis.asyncio as aioredis


async def run_async(url: str, list_key: str, counter_key: str) -> None:
    # The body's client as bench/tasks.py makes it (no socket timeout).
    waiter, body = aioredis.Redis.from_url(url), aioredis.Redis.from_url(url, socket_timeout=None)
    await waiter.set(f"{list_key}:ready", 1)
    while True:
        if await waiter.blpop([list_key], timeout=1):
            await body.incr(counter_key)


def run_sync(url: str, list_key: str, counter_key: str) -> None:
    waiter, body = redis.Redis.from_url(url), redis.Redis.from_url(url)
    waiter.set(f"{list_key}:ready", 1)
    while True:
        if waiter.blpop([list_key], timeout=1):
            body.incr(counter_key)


def main() -> None:
    url, list_key, counter_key, mode = sys.argv[1:5]
    try:
        if mode == "async":
            asyncio.run(run_async(url, list_key, counter_key))
        else:
            run_sync(url, list_key, counter_key)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
