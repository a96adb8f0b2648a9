"""RQ (the default Worker forks a work horse per job; SimpleWorker runs jobs in-process). Sync only."""

from __future__ import annotations

import os

import redis
from rq import Queue

from .body import PAD_ARGS, incr_sync

queue = Queue("bench", connection=redis.Redis.from_url(os.environ["BENCH_REDIS_URL"]))


def send(key: str, body: str) -> None:
    assert body == "sync"
    queue.enqueue(incr_sync, key, *PAD_ARGS)


def send_many(key: str, n: int, body: str) -> None:
    assert body == "sync"
    for start in range(0, n, 1000):
        queue.enqueue_many([Queue.prepare_data(incr_sync, (key, *PAD_ARGS)) for _ in range(min(1000, n - start))])
