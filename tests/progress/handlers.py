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


@dtq_tasks.task("progress.stale")
def stale(payload: dict[str, Any]) -> str:
    """The task's first run reports 'stale' until released (outliving its timeout, or its worker's
    freeze); a later run reports 'fresh' once, sets `<prefix>:testlog:fresh:<task id>`, and waits
    to be released."""
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    client, prefix = get_engine().client, get_engine().keys.prefix
    run = client.incr(f"{prefix}:testlog:runs:{ctx.task_id}")
    deadline = time.monotonic() + 40
    if run == 1:
        while not _released() and time.monotonic() < deadline:
            ctx.progress(1, 100, "stale")
            time.sleep(0.05)
        return "old"
    ctx.progress(50, 100, "fresh")
    client.set(f"{prefix}:testlog:fresh:{ctx.task_id}", "1")
    while not _released() and time.monotonic() < deadline:
        time.sleep(0.05)
    return "new"


@dtq_tasks.task("progress.message")
def message(payload: dict[str, Any]) -> str:
    """Report progress with payload['message'] (a file name holding a lone surrogate when
    payload['surrogate']) until released."""
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    text = "file \udcff.csv" if payload.get("surrogate") else str(payload.get("message", "ok"))
    deadline = time.monotonic() + 40
    i = 0
    while not _released() and time.monotonic() < deadline:
        i += 1
        ctx.progress(i, 1000, text)
        time.sleep(0.02)
    return "done"
