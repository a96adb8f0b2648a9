"""Dramatiq with its Redis broker. Sync actors only (Dramatiq 2.2 has no async actor without
its AsyncIO middleware's own loop thread, which is not a worker model of its own). Prefetch
comes from dramatiq's own `dramatiq_queue_prefetch` environment variable (systems.py sets it)."""

from __future__ import annotations

import os

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from .body import PAD_ARGS
from .body import incr_sync as _incr_sync

dramatiq.set_broker(RedisBroker(url=os.environ["BENCH_REDIS_URL"]))


@dramatiq.actor(queue_name="bench", actor_name="incr_sync")
def incr_sync(key: str, pad: str = "") -> None:
    _incr_sync(key)


def send(key: str, body: str) -> None:
    assert body == "sync"
    incr_sync.send(key, *PAD_ARGS)
