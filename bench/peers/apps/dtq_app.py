"""dtq itself, driven like the peers (runs in dtq's own .venv); the worker imports this module
(DTQ_TASK_MODULES) for its two handlers, registered as any user's would be."""

from __future__ import annotations

import os
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
django.setup()

import dtq_tasks  # noqa: E402
from dtq_core.conf import get_engine  # noqa: E402

from .body import PAD, incr_async, incr_sync  # noqa: E402

# The task's payload: {"k": counter key}, and "p" the pad when the run asks for one (body.py).
PAYLOAD_PAD: dict[str, str] = {"p": PAD} if PAD else {}


@dtq_tasks.task("bench.incr_sync")
def incr_sync_task(payload: Any) -> None:
    incr_sync(payload["k"])


@dtq_tasks.task("bench.incr_async")
async def incr_async_task(payload: Any) -> None:
    await incr_async(payload["k"])


def send(key: str, body: str) -> None:
    dtq_tasks.enqueue(f"bench.incr_{body}", {"k": key, **PAYLOAD_PAD}, queue="bench")


def send_many(key: str, n: int, body: str) -> None:
    tasks = get_engine().tasks
    for start in range(0, n, 1000):
        tasks.enqueue_many([tasks.validate(f"bench.incr_{body}", {"k": key, **PAYLOAD_PAD}, queue="bench")
                            for _ in range(min(1000, n - start))])
