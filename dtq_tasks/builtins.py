"""Built-in task types for smoke tests, demos and acceptance checks."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from dtq_core.registry import RetryableError, current_task

from .api import task


def _seconds(payload: Any) -> float:
    seconds = payload.get("seconds", 0) if isinstance(payload, dict) else None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0 <= seconds <= 86400:
        raise ValueError('payload must be {"seconds": <number between 0 and 86400>}')
    return float(seconds)


@task("dtq.echo")
async def echo(payload: Any) -> Any:
    """Return the payload."""
    return payload


@task("dtq.sleep")
async def sleep(payload: Any) -> dict[str, float]:
    """Sleep on the event loop for payload["seconds"]."""
    seconds = _seconds(payload)
    await asyncio.sleep(seconds)
    return {"slept": seconds}


@task("dtq.sleep_sync")
def sleep_sync(payload: Any) -> dict[str, float]:
    """Sleep in a worker thread for payload["seconds"]."""
    seconds = _seconds(payload)
    time.sleep(seconds)
    return {"slept": seconds}


@task("dtq.fail")
async def fail(payload: Any) -> None:
    """Fail: retryably when payload["retryable"] is true, permanently otherwise."""
    payload = payload if isinstance(payload, dict) else {}
    message = str(payload.get("message", "dtq.fail was asked to fail"))
    if payload.get("retryable"):
        raise RetryableError(message)
    raise RuntimeError(message)


@task("dtq.flaky")
async def flaky(payload: Any) -> dict[str, int]:
    """Raise RetryableError while attempt <= fail_times, then return {"attempt": attempt}."""
    fail_times = payload.get("fail_times", 1) if isinstance(payload, dict) else 1
    ctx = current_task()
    attempt = ctx.attempt if ctx else 1
    if attempt <= int(fail_times):
        raise RetryableError(f"flaky: attempt {attempt} of {fail_times} planned failures")
    return {"attempt": attempt}
