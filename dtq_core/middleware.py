"""Task middleware: code of the project's own that runs on every enqueue and around every attempt
(docs/tasks.md, "Middleware"), as Sidekiq's and Dramatiq's middleware do.

- DTQ_ENQUEUE_MIDDLEWARE: classes whose `before_enqueue(task)` sees an OutgoingTask before it is
  validated and queued, wherever it comes from (dtq_tasks.enqueue, the REST API single and batch,
  the Django Tasks backend, a workflow's steps). It may change the payload and the headers, or
  raise TaskRefused to refuse the task with a message (the API answers 400 TASK_REFUSED).
- DTQ_EXECUTION_MIDDLEWARE: classes whose `execute(ctx, payload, call_next)` (sync handlers, in the
  handler's thread) or `aexecute(...)` (async handlers, on the worker's loop) wrap each attempt;
  the defaults call the hooks `before(ctx, payload)`, `after(ctx, result)` and `on_error(ctx,
  exc)`, so overriding those works for both kinds of handler.

Each class is instantiated once per process, in the order listed (the first is the outermost).
A path that does not import, or a class that is not one of these, stops the process with one line.
With both settings empty, the hot path pays one attribute check each.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .config import ConfigError, DtqConfig

if TYPE_CHECKING:
    from .registry import TaskContext


@dataclass(slots=True)
class OutgoingTask:
    """A task on its way to its queue, as an enqueue middleware sees it. `payload` and `headers`
    may be changed (headers: string names of 1-64 of A-Z a-z 0-9 _ . -, string values); the rest
    is for reading."""

    type: str
    queue: str
    priority: str
    payload: Any
    headers: dict[str, str] = field(default_factory=dict)


class EnqueueMiddleware:
    def before_enqueue(self, task: OutgoingTask) -> None:
        """Change task.payload or task.headers, or raise dtq_tasks.TaskRefused("why")."""


class ExecutionMiddleware:
    """Wraps every attempt. Override the hooks, or execute/aexecute for full control (an async
    handler's attempt runs aexecute on the worker's event loop: keep it non-blocking)."""

    def before(self, ctx: TaskContext, payload: Any) -> None:
        """Before the handler runs (in its thread, or on the loop for an async handler)."""

    def after(self, ctx: TaskContext, result: Any) -> None:
        """After it returned `result`."""

    def on_error(self, ctx: TaskContext, exc: BaseException) -> None:
        """After it raised `exc` (which is then raised on: retried or failed as usual)."""

    def execute(self, ctx: TaskContext, payload: Any, call_next: Callable[[Any], Any]) -> Any:
        self.before(ctx, payload)
        try:
            result = call_next(payload)
        except BaseException as exc:
            self.on_error(ctx, exc)
            raise
        self.after(ctx, result)
        return result

    async def aexecute(self, ctx: TaskContext, payload: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
        self.before(ctx, payload)
        try:
            result = await call_next(payload)
        except BaseException as exc:
            self.on_error(ctx, exc)
            raise
        self.after(ctx, result)
        return result


def _instantiate(path: str, base: type, setting: str) -> Any:
    module_name, _, name = path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name) if module_name else None
    except ImportError as exc:
        raise ConfigError(f"{setting}: cannot import {path!r} ({exc})") from None
    except AttributeError:
        cls = None
    if cls is None:
        raise ConfigError(f"{setting}: {path!r} names nothing (give a dotted path to a class)")
    if not isinstance(cls, type) or not issubclass(cls, base):
        raise ConfigError(f"{setting}: {path!r} is not a subclass of dtq_tasks.{base.__name__}")
    return cls()


@functools.lru_cache(maxsize=8)
def enqueue_chain(paths: tuple[str, ...]) -> tuple[EnqueueMiddleware, ...]:
    return tuple(_instantiate(p, EnqueueMiddleware, "DTQ_ENQUEUE_MIDDLEWARE") for p in paths)


@functools.lru_cache(maxsize=8)
def execution_chain(paths: tuple[str, ...]) -> tuple[ExecutionMiddleware, ...]:
    return tuple(_instantiate(p, ExecutionMiddleware, "DTQ_EXECUTION_MIDDLEWARE") for p in paths)


def run_enqueue_middleware(config: DtqConfig, type: Any, payload: Any, queue: Any, priority: Any,
                           headers: Any) -> tuple[Any, Any]:
    """(payload, headers) after every enqueue middleware saw the task; TaskRefused propagates."""
    task = OutgoingTask(type=type, queue=queue, priority=priority, payload=payload,
                        headers=dict(headers) if isinstance(headers, dict) else ({} if headers is None else headers))
    for middleware in enqueue_chain(config.enqueue_middleware):
        middleware.before_enqueue(task)
    return task.payload, task.headers or None


def wrap_sync(chain: tuple[ExecutionMiddleware, ...], ctx: TaskContext, fn: Callable[[Any], Any]
              ) -> Callable[[Any], Any]:
    """fn wrapped by the chain, the first middleware outermost."""
    for middleware in reversed(chain):
        fn = functools.partial(middleware.execute, ctx, call_next=fn)
    return fn


def wrap_async(chain: tuple[ExecutionMiddleware, ...], ctx: TaskContext,
               fn: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    for middleware in reversed(chain):
        fn = functools.partial(middleware.aexecute, ctx, call_next=fn)
    return fn
