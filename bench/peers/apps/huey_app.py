"""Huey with RedisHuey (blocking BRPOP dequeue)."""

from __future__ import annotations

import os

import redis
from huey import RedisHuey

URL = os.environ["BENCH_REDIS_URL"]
huey = RedisHuey("bench", url=URL)
r = redis.Redis.from_url(URL)


@huey.task()
def noop(key: str) -> None:
    r.incr(key)


def send(key: str) -> None:
    noop(key)
