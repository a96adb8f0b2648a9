"""taskiq with taskiq-redis: BENCH_TASKIQ_BROKER=list is ListQueueBroker (LPUSH/BRPOP: a task is
gone from Redis once fetched, at most once), =stream is RedisStreamBroker (XADD/XREADGROUP/XACK
after the task ran: at least once, as dtq). Async tasks run on its loop, plain ones in its
thread pool (--max-threadpool-threads)."""

from __future__ import annotations

import os

from taskiq_redis import ListQueueBroker, RedisStreamBroker

from .body import PAD_ARGS
from .body import incr_async as _incr_async
from .body import incr_sync as _incr_sync

URL = os.environ["BENCH_REDIS_URL"]
# socket_timeout=None as the body's client: with redis-py 8's default (5 s) the list broker's
# BRPOP (no timeout of its own) fails after 5 idle seconds and taskiq restarts its worker process.
if os.environ.get("BENCH_TASKIQ_BROKER", "list") == "stream":
    # consumer_id "0": the group (made by whoever starts first) also sees tasks queued before it.
    broker = RedisStreamBroker(URL, queue_name="bench", consumer_id="0", socket_timeout=None)
else:
    broker = ListQueueBroker(URL, queue_name="bench", socket_timeout=None)


@broker.task(task_name="incr_sync")
def incr_sync(key: str, pad: str = "") -> None:
    _incr_sync(key)


@broker.task(task_name="incr_async")
async def incr_async(key: str, pad: str = "") -> None:
    await _incr_async(key)


_started = False


async def send(key: str, body: str) -> None:
    global _started
    if not _started:
        await broker.startup()
        _started = True
    await (incr_sync if body == "sync" else incr_async).kiq(key, *PAD_ARGS)
