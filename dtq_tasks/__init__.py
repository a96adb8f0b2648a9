"""What handler authors import: the `task` and `periodic` decorators, RetryableError, RateLimited,
enqueue, enqueue_many, idempotent_operation, current_task, the workflow builders (step, chain,
group) and the middleware bases (signals: dtq_tasks.signals). Importing this module registers the built-in tasks."""

from __future__ import annotations

from dtq_core.errors import TaskRefused
from dtq_core.middleware import EnqueueMiddleware, ExecutionMiddleware, OutgoingTask
from dtq_core.registry import RateLimited, RetryableError, TaskContext, current_task

from .api import enqueue, enqueue_many, periodic, task
from .once import aidempotent_operation, idempotent_operation
from .workflows import Chain, Group, Step, chain, group, step

__all__ = [
    "Chain", "EnqueueMiddleware", "ExecutionMiddleware", "Group", "OutgoingTask", "RateLimited", "RetryableError",
    "Step", "TaskContext", "TaskRefused", "aidempotent_operation", "chain", "current_task", "enqueue",
    "enqueue_many", "group", "idempotent_operation", "periodic", "step", "task",
]

from . import builtins as _builtins  # noqa: F401  (registers dtq.echo, dtq.sleep, ...)
