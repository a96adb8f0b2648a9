"""Handlers that report progress, for real worker processes (DTQ_TASK_MODULES=tests.progress.handlers).
Each holds its task RUNNING until the test sets the key `<prefix>:testlog:release`, so the test
reads what the worker wrote while the task runs."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import dtq_tasks
from dtq_core.conf import get_engine


def _released() -> bool:
    return bool(get_engine().client.exists(f"{get_engine().keys.prefix}:testlog:release"))


@dtq_tasks.task("progress.tight")
def tight(payload: dict[str, Any]) -> int:
    """A sync handler that reports in a tight loop, then waits to be released."""
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    n = int(payload.get("n", 10000))
    for i in range(1, n + 1):
        ctx.progress(i, n, f"row {i}")
    deadline = time.monotonic() + 30
    while not _released() and time.monotonic() < deadline:
        time.sleep(0.02)
    return n


@dtq_tasks.task("progress.steps")
async def steps(payload: dict[str, Any]) -> int:
    """An async handler that reports one step every `every` seconds, then waits to be released."""
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    total = int(payload.get("steps", 5))
    for i in range(1, total + 1):
        ctx.progress(i, total, f"step {i} of {total}")
        await asyncio.sleep(float(payload.get("every", 0.3)))
    deadline = time.monotonic() + 30
    while not _released() and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return total
