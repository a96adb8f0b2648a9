"""Task handlers by name, and the context a running handler can read."""

from __future__ import annotations

import contextvars
import importlib
import inspect
import os
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .progress import Report, checked
from .submit import MAX_DELAY_S

Handler = Callable[[Any], Any]


class TaskModuleError(Exception):
    """A DTQ_TASK_MODULES module failed to import; the message is one line naming it."""


class RetryableError(Exception):
    """Raise from a handler to retry the task with backoff (until max_attempts, then the DLQ).

    retry_after (seconds, a number or a numeric string such as a Retry-After header's) replaces
    the backoff for this retry (Celery's countdown, Sidekiq's sidekiq_retry_in). A value that is not
    a number of seconds from 0 to 366 days is ignored: the usual backoff applies. Raising must not
    fail, or a rate-limited call would turn into a permanent failure.
    """

    def __init__(self, *args: object, retry_after: float | str | None = None) -> None:
        super().__init__(*args)
        self.retry_after = _seconds(retry_after)


class RateLimited(RetryableError):
    """Raise from a handler that hit a rate limit (e.g. an HTTP 429): the task goes back to wait,
    not counted as an attempt and never to the DLQ for it, and its queue (scope="queue") or its
    group (scope="group": the tasks with the same group_key) starts nothing before retry_after
    seconds have passed. A retry_after that is not a number of seconds (0 to 366 days) waits 1 s.
    A task without a group_key that pauses its group waits alone.
    """

    def __init__(self, *args: object, retry_after: float | str | None = None, scope: str = "queue") -> None:
        super().__init__(*args, retry_after=retry_after)
        if self.retry_after is None:
            self.retry_after = 1.0
        self.scope = "group" if scope == "group" else "queue"


def _seconds(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        seconds = float(value)
    except (ValueError, OverflowError):
        return None  # an HTTP-date Retry-After, or an int past float's range
    return seconds if 0 <= seconds <= MAX_DELAY_S else None  # the longest wait a task may be given


@dataclass(frozen=True, kw_only=True, slots=True)
class TaskContext:
    task_id: str
    attempt: int
    max_attempts: int
    queue: str
    type: str
    worker_id: str
    entry_id: str = ""  # the stream entry this attempt runs under (fences the Django runner's record)
    # A workflow's step (docs/tasks.md, "Workflows"): its workflow, its index, and its input: a chain
    # step's predecessor's result, a group's `then` the list of its members' results in order (a
    # tolerated failure as {"error": {"class", "message", "status"}}). "" / -1 / None otherwise.
    workflow_id: str = ""
    workflow_step: int = -1
    parent_result: Any = None
    # Where progress() leaves its reports: the worker's ProgressReporter (None outside a worker).
    reporter: Any = field(default=None, repr=False, compare=False)
    # The task's headers (read-only): what its enqueuer and the enqueue middleware put there.
    headers: Mapping[str, str] = field(default_factory=dict)

    def progress(self, done: float, total: float | None = None, message: str = "") -> None:
        """Say how far this attempt got: `done` of `total` (None: unknown), with a short message
        (at most 200 characters kept). Returns at once, from sync and async handlers alike: the
        worker writes the latest value at most once per DTQ_PROGRESS_MIN_INTERVAL_S, so calling it
        in a tight loop is fine. Raises ValueError for a negative or non-finite `done`, a `total`
        that is not greater than 0, TypeError for a message that is not a string."""
        done_, total_, message_ = checked(done, total, message)
        if self.reporter is not None:
            self.reporter.offer(Report(self.task_id, self.attempt, self.entry_id, done_, total_, message_))


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


def names() -> list[str]:
    """The registered task types, sorted (the worker's start-up line counts them)."""
    return sorted(_HANDLERS)


def _qualname(fn: Handler) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def get(name: str) -> Registered | None:
    return _HANDLERS.get(name)


def served_types() -> list[str]:
    """The task types this process's handlers serve, as a worker registers them at start (with
    the Django runner, django.task and django.atask: it serves every Django task)."""
    return sorted(_HANDLERS)


def current_task() -> TaskContext | None:
    """The task the calling handler is running for (None outside a handler)."""
    return _current.get()


def set_current(ctx: TaskContext) -> contextvars.Token[TaskContext | None]:
    return _current.set(ctx)


def import_task_modules(modules: tuple[str, ...]) -> None:
    """Import DTQ_TASK_MODULES so their @task decorators register handlers.

    The built-in types are registered by whoever runs tasks (the worker imports dtq_tasks and
    dtq_core.django_tasks.runner): this module sits below both and imports neither.
    """
    for module in modules:
        try:
            importlib.import_module(module)
        except SyntaxError as exc:
            raise TaskModuleError(f"DTQ_TASK_MODULES: cannot import {module}: {type(exc).__name__}: {exc.msg} "
                                  f"({exc.filename}:{exc.lineno})") from exc
        except ImportError as exc:
            # Name the listed module too: "No module named 'requests'" alone reads as a typo in the list.
            raise TaskModuleError(f"DTQ_TASK_MODULES: cannot import {module}: {exc}") from exc
        except Exception as exc:
            raise TaskModuleError(f"DTQ_TASK_MODULES: cannot import {module}: {type(exc).__name__}: {exc}"
                                  f"{_where(exc)}") from exc


def _where(exc: BaseException) -> str:
    """Where the import failed: the innermost frame outside dtq itself (a duplicate registration
    is raised in register(), but the author needs the line of their decorator)."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if not f.filename.startswith("<") and not f.filename.startswith(_NOT_THE_AUTHORS)]
    return f" ({frames[-1].filename}:{frames[-1].lineno})" if frames else ""


_DTQ_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_NOT_THE_AUTHORS = (os.path.join(_DTQ_ROOT, "dtq_core", ""), os.path.join(_DTQ_ROOT, "dtq_tasks", ""))
