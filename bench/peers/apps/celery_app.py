"""Celery with its Redis broker (kombu)."""

from __future__ import annotations

import os

import redis
from celery import Celery

URL = os.environ["BENCH_REDIS_URL"]
app = Celery("bench", broker=URL)
app.conf.task_default_queue = "bench"
app.conf.broker_connection_retry_on_startup = True
r = redis.Redis.from_url(URL)


@app.task(name="noop", ignore_result=True)
def noop(key: str) -> None:
    r.incr(key)


def send(key: str) -> None:
    noop.delay(key)
