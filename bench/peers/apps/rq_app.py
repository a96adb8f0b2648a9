"""RQ (the default Worker forks a work horse per job; SimpleWorker runs jobs in-process)."""

from __future__ import annotations

import os

import redis
from rq import Queue

URL = os.environ["BENCH_REDIS_URL"]
r = redis.Redis.from_url(URL)
queue = Queue("bench", connection=r)


def noop(key: str) -> None:
    r.incr(key)


def send(key: str) -> None:
    queue.enqueue(noop, key)


def send_many(key: str, n: int) -> None:
    queue.enqueue_many([Queue.prepare_data(noop, (key,)) for _ in range(n)])
