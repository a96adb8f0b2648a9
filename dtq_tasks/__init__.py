"""What handler authors import: the `task` and `periodic` decorators, RetryableError, RateLimited,
enqueue, idempotent_operation and current_task. Importing this module registers the built-in tasks."""

from __future__ import annotations

from dtq_core.registry import RateLimited, RetryableError, TaskContext, current_task

from .api import enqueue, periodic, task
from .once import aidempotent_operation, idempotent_operation

__all__ = [
    "RateLimited", "RetryableError", "TaskContext", "aidempotent_operation", "current_task", "enqueue",
    "idempotent_operation", "periodic", "task",
]

from . import builtins as _builtins  # noqa: F401  (registers dtq.echo, dtq.sleep, ...)
