"""Dramatiq with its Redis broker."""

from __future__ import annotations

import os

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

URL = os.environ["BENCH_REDIS_URL"]
dramatiq.set_broker(RedisBroker(url=URL))
r = redis.Redis.from_url(URL)


@dramatiq.actor(queue_name="bench")
def noop(key: str) -> None:
    r.incr(key)


def send(key: str) -> None:
    noop.send(key)
