"""dtq itself, driven like the peers (runs in dtq's own .venv). The task is bench.tasks.noop."""

from __future__ import annotations

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
django.setup()

from dtq_core.config import DtqConfig  # noqa: E402
from dtq_core.engine import Engine  # noqa: E402

engine = Engine(DtqConfig(redis_url=os.environ["BENCH_REDIS_URL"], max_queue_depth=0))


def send(key: str) -> None:
    # What dtq_tasks.enqueue does (it returns the id): no record read back.
    engine.tasks.enqueue("bench.noop", {"k": key}, queue="bench", record=False)


def send_many(key: str, n: int) -> None:
    for start in range(0, n, 1000):
        engine.tasks.enqueue_many([engine.tasks.validate("bench.noop", {"k": key}, queue="bench")
                                   for _ in range(min(1000, n - start))])
