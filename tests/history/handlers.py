"""Handlers the history tests' real workers load (DTQ_TASK_MODULES=tests.history.handlers)."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import dtq_tasks
from dtq_core.conf import get_engine
from dtq_core.registry import RetryableError, current_task


@dtq_tasks.task("hist.sleep")
def sleep(payload: dict[str, Any]) -> None:
    time.sleep(float(payload.get("ms", 0)) / 1000)


@dtq_tasks.task("hist.fail")
def fail(payload: dict[str, Any]) -> None:
    """Fail every attempt with an error worth retrying: retried until max_attempts, then dead."""
    raise RetryableError("refused on purpose")


@dtq_tasks.task("hist.die_once")
def die_once(payload: dict[str, Any]) -> None:
    """SIGKILL the own worker on the first attempt (after saying so); succeed on the next."""
    ctx = current_task()
    assert ctx is not None
    if ctx.attempt == 1:
        get_engine().client.set(f"{get_engine().keys.prefix}:testlog:dying", str(os.getpid()))
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.05)
