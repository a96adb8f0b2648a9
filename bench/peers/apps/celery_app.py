"""Celery with its Redis broker (kombu). Sync tasks only (Celery has no async task bodies)."""

from __future__ import annotations

import os

from celery import Celery

from .body import PAD_ARGS
from .body import incr_sync as _incr_sync

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.task_default_queue = "bench"
app.conf.broker_connection_retry_on_startup = True


@app.task(name="incr_sync", ignore_result=True)
def incr_sync(key: str, pad: str = "") -> None:
    _incr_sync(key)


def send(key: str, body: str) -> None:
    assert body == "sync"
    incr_sync.delay(key, *PAD_ARGS)
