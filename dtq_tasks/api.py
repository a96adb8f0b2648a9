"""The `task` decorator and `enqueue`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from dtq_core import registry
from dtq_core.conf import get_engine
from dtq_core.task import TASK_TYPE_RE

F = TypeVar("F", bound=Callable[..., Any])


def task(name: str) -> Callable[[F], F]:
    """Register a sync or async function as the handler of task type `name`.

    The handler receives the payload as its one argument; `dtq_tasks.current_task()` gives its
    task id, attempt and queue. Sync handlers run in the worker's thread pool, async ones on
    its event loop.
    """
    if not isinstance(name, str) or not TASK_TYPE_RE.fullmatch(name):
        raise ValueError(f"invalid task type name {name!r}")

    def decorate(fn: F) -> F:
        if not callable(fn):  # a worker would only find out when the first task of this type runs
            raise TypeError(f"@dtq_tasks.task({name!r}) must decorate a function, not {type(fn).__name__} {fn!r}")
        registry.register(name, fn)
        return fn

    return decorate


def enqueue(
    type: str,
    payload: Any = None,
    *,
    queue: str = "default",
    priority: str = "normal",
    delay_seconds: float = 0,
    ttl_seconds: float | None = None,
    max_attempts: int | None = None,
    timeout_seconds: float | None = None,
    idempotency_key: str | None = None,
) -> str:
    """Queue up a task and return its id (the first task's id when the idempotency key was seen).

    Raises dtq_core.errors.ValidationError, PayloadTooLarge, QueueFull, or QueueLimitReached (a new
    queue past DTQ_MAX_QUEUES).
    """
    return get_engine().tasks.enqueue(
        type, payload, queue=queue, priority=priority, delay_seconds=delay_seconds, ttl_seconds=ttl_seconds,
        max_attempts=max_attempts, timeout_seconds=timeout_seconds, idempotency_key=idempotency_key,
        record=False,
    ).id
