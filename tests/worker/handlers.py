"""Handlers a real worker process loads through DTQ_TASK_MODULES=tests.worker.handlers."""

from __future__ import annotations

import os
from typing import Any

import dtq_tasks


@dtq_tasks.task("test.pid")
def pid(payload: Any) -> dict[str, int]:
    """Return the worker's pid, to show which process ran the task."""
    return {"pid": os.getpid()}
