"""Handlers the flow-control tests' worker processes load (DTQ_TASK_MODULES=tests.limits.handlers).

Each run logs its start and end (ms) with its group key in a list under the test's prefix, so a
test can rebuild from the outside which runs overlapped.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import dtq_tasks
from dtq_core.conf import get_engine
from dtq_core.registry import current_task


def log_key(name: str) -> str:
    return f"{get_engine().keys.prefix}:testlog:{name}"


async def _log(kind: str, payload: dict[str, Any]) -> None:
    ctx = current_task()
    assert ctx is not None
    entry = json.dumps({"kind": kind, "task": ctx.task_id, "attempt": ctx.attempt,
                        "group": payload.get("group"), "at": time.time() * 1000})
    await asyncio.to_thread(get_engine().client.rpush, log_key("runs"), entry)


@dtq_tasks.task("limits.sleep")
async def sleep(payload: dict[str, Any]) -> None:
    await _log("start", payload)
    await asyncio.sleep(float(payload.get("seconds", 0)))
    await _log("end", payload)


@dtq_tasks.task("limits.rate_limited")
async def rate_limited(payload: dict[str, Any]) -> None:
    """Raises RateLimited on its first run, succeeds on the next."""
    await _log("start", payload)
    ctx = current_task()
    assert ctx is not None
    runs = await asyncio.to_thread(get_engine().client.hincrby, log_key("limited"), ctx.task_id, 1)
    if runs == 1:
        raise dtq_tasks.RateLimited("429 from the API", retry_after=payload["retry_after"],
                                    scope=payload.get("scope", "queue"))
    await _log("end", payload)


@dtq_tasks.task("limits.api_call")
async def api_call(payload: dict[str, Any]) -> None:
    """Calls a downstream API (logged as a start); its first `fail` calls meet a 429 and raise
    RateLimited(retry_after)."""
    await _log("start", payload)
    ctx = current_task()
    assert ctx is not None
    calls = await asyncio.to_thread(get_engine().client.hincrby, log_key("calls"), ctx.task_id, 1)
    if calls <= int(payload.get("fail", 0)):
        raise dtq_tasks.RateLimited("429 from the API", retry_after=payload.get("retry_after", 0.2),
                                    scope=payload.get("scope", "group"))
    await _log("end", payload)
