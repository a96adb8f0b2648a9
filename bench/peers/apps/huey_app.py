"""Huey with RedisHuey (blocking BRPOP dequeue). Sync tasks only."""

from __future__ import annotations

import os

from huey import RedisHuey

from .body import PAD_ARGS
from .body import incr_sync as _incr_sync

huey = RedisHuey("bench", url=os.environ["BENCH_REDIS_URL"])


@huey.task(name="incr_sync")
def incr_sync(key: str, pad: str = "") -> None:
    _incr_sync(key)


def send(key: str, body: str) -> None:
    assert body == "sync"
    incr_sync(key, *PAD_ARGS)
