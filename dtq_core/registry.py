"""Task handlers by name, and the context a running handler can read."""

from __future__ import annotations

import contextvars
import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Handler = Callable[[Any], Any]


class RetryableError(Exception):
    """Raise from a handler to retry the task with backoff (until max_attempts, then the DLQ)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskContext:
    task_id: str
    attempt: int
    max_attempts: int
    queue: str
    type: str
    worker_id: str


@dataclass(frozen=True, slots=True)
class Registered:
    name: str
    fn: Handler
    is_async: bool


_HANDLERS: dict[str, Registered] = {}
_current: contextvars.ContextVar[TaskContext | None] = contextvars.ContextVar("dtq_current_task", default=None)


def register(name: str, fn: Handler) -> Handler:
    existing = _HANDLERS.get(name)
    if existing is not None and existing.fn is not fn and _qualname(existing.fn) != _qualname(fn):
        raise ValueError(f"task type {name!r} is already registered to {_qualname(existing.fn)}")
    _HANDLERS[name] = Registered(name, fn, inspect.iscoroutinefunction(fn))
    return fn


def _qualname(fn: Handler) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def get(name: str) -> Registered | None:
    return _HANDLERS.get(name)


def current_task() -> TaskContext | None:
    """The task the calling handler is running for (None outside a handler)."""
    return _current.get()


def set_current(ctx: TaskContext) -> contextvars.Token[TaskContext | None]:
    return _current.set(ctx)


def import_task_modules(modules: tuple[str, ...]) -> None:
    """Import DTQ_TASK_MODULES so their @task decorators register handlers."""
    import dtq_core.django_tasks_runner  # noqa: F401  (django.task / django.atask: the Django Tasks backend)
    import dtq_tasks  # noqa: F401  (built-ins)

    for module in modules:
        importlib.import_module(module)
