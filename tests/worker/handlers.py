"""Handlers a real worker process loads through DTQ_TASK_MODULES=tests.worker.handlers."""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any

import dtq_tasks


@dtq_tasks.task("test.pid")
def pid(payload: Any) -> dict[str, int]:
    """Return the worker's pid, to show which process ran the task."""
    return {"pid": os.getpid()}


@dtq_tasks.task("test.sleep")
def sleep(payload: Any) -> None:
    """Run for payload["s"] seconds: a long attempt."""
    time.sleep(float(payload["s"]))


@dtq_tasks.task("test.spawn")
def spawn(payload: Any) -> dict[str, int]:
    """Start a program that outlives the attempt (`sleep`, for payload["s"] seconds) and return its
    pid: the test that enqueues it stops it."""
    child = subprocess.Popen(["sleep", str(payload["s"])], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    return {"pid": child.pid}


@dtq_tasks.task("test.spin")
def spin(payload: Any) -> None:
    """Compute in Python for payload["ms"] milliseconds of this thread's CPU time: a handler that
    holds the GIL the whole time, releasing it only when the interpreter makes it switch."""
    until = time.thread_time() + float(payload["ms"]) / 1000
    while time.thread_time() < until:
        pass
