"""The built-in handlers that run Django tasks on a dtq worker: `django.task` and `django.atask`.

Two handlers because dtq runs sync handlers in the worker's thread pool (with its timeout and
detach accounting) and async ones on the event loop: the backend picks one from the task
function and records it as the task's `handler`, while the task's type is the function's import
path (a task queued before that has the handler's name as its type, and runs the same way).
Every worker registers both, so it serves every Django task. Each attempt:
  1. imports the Task at the payload's module_path (and applies the enqueue-time overrides);
  2. records this worker for the attempt (TaskResult.worker_ids, started_at) in the task hash;
  3. sends task_started, calls the function (with a TaskContext first when takes_context);
  4. sends task_finished once the outcome is final and returns the JSON-normalised value, or
     re-raises so the executor records the error. "Final" is the worker's own rule
     (executor.retryable(): RetryableError, timeouts and Redis outages retry while attempts are
     left; RateLimited is never final, not being an attempt), and an attempt the worker gave up
     on (its timeout, a cancel, the drain) sends no task_finished at all: a sync function runs on
     in its thread after that, and its outcome is dropped.
Importing this module registers both handlers; the worker's start-up does (dtq_worker).
"""

from __future__ import annotations

import asyncio
import json
import logging
import traceback
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import close_old_connections

from .. import registry
from ..conf import get_engine
from ..keys import tag_of
from ..worker.executor import error_name, given_up, retryable
from . import results
from .backend import DtqBackend
from .compat import TaskContext, TaskError, TaskResult, TaskResultStatus, normalize_json, task_finished, task_started
from .results import ASYNC_TYPE, SYNC_TYPE

logger = logging.getLogger(__name__)

# Not an outcome of the task: the executor leaves the attempt's entry to redelivery (Django's
# ImmediateBackend re-raises KeyboardInterrupt too, and fails the task on any other BaseException).
_NOT_OUTCOMES = (KeyboardInterrupt, SystemExit)


@dataclass(slots=True)
class Attempt:
    task: Any  # the Django Task
    result: Any  # its TaskResult, RUNNING, as task_started receivers and the TaskContext see it
    call_args: list[Any]
    call_kwargs: dict[str, Any]
    final_on_error: bool  # the last attempt: an error now ends the task, whatever it is (RateLimited aside)


def prepare(payload: Any) -> Attempt:
    """Resolve the task and build its RUNNING TaskResult for this attempt (steps 1 and 2)."""
    ctx = registry.current_task()
    if ctx is None:
        raise RuntimeError("the Django task runner must run inside a dtq worker")
    call = results.Call.from_payload(payload)
    task = results.resolve_task(call)
    ids, first_start, errors, created = _record(ctx)
    now = datetime.now(tz=UTC)
    result: TaskResult[Any] = TaskResult(
        task=task, id=ctx.task_id, status=TaskResultStatus.RUNNING, enqueued_at=results.from_ms(created),
        started_at=results.from_ms(first_start) or now, finished_at=None, last_attempted_at=now,
        args=call.args, kwargs=call.kwargs, backend=call.overrides.get("backend", task.backend),
        errors=results.task_errors(errors), worker_ids=ids or [ctx.worker_id],
    )
    args = [TaskContext(task_result=result), *call.args] if call.takes_context else list(call.args)
    return Attempt(task=task, result=result, call_args=args, call_kwargs=call.kwargs,
                   final_on_error=ctx.attempt >= ctx.max_attempts)


def _record(ctx: registry.TaskContext) -> tuple[list[str], str, str, str]:
    engine = get_engine()
    reply = engine.scripts("recordDjangoAttempt", keys=[engine.keys.partition(tag_of(ctx.task_id))],
                           args=[ctx.task_id, ctx.attempt, ctx.worker_id, ctx.entry_id])
    if not reply:  # cancelled or reclaimed meanwhile: run anyway, the completion is fenced
        return [ctx.worker_id], "", "", ""
    ids, first_start, errors, created = reply
    return [str(i) for i in json.loads(ids)], first_start, errors, created


def _succeeded(attempt: Attempt, raw: Any) -> Any:
    value = normalize_json(raw)  # a value with no JSON form fails the task, as in Django's backends
    result = attempt.result
    object.__setattr__(result, "_return_value", value)
    object.__setattr__(result, "finished_at", datetime.now(tz=UTC))
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    return value


def _failed(attempt: Attempt, exc: BaseException) -> bool:
    """Record the error on the TaskResult; return whether the task is now finished, by the rule
    the worker then applies (executor.retryable): one rule, or task_finished would say FAILED for
    an attempt dtq retries."""
    result = attempt.result
    if isinstance(exc, registry.RateLimited):
        # Not a failure and not an attempt: the task waits and runs again, with no errors entry.
        object.__setattr__(result, "status", TaskResultStatus.READY)
        return False
    final = attempt.final_on_error or not retryable(exc)
    # The path get_result shows later, from the name the executor records: the two agree.
    result.errors.append(TaskError(exception_class_path=results.error_path(error_name(exc)),
                                   traceback="".join(traceback.format_exception(exc))))
    if final:
        object.__setattr__(result, "finished_at", datetime.now(tz=UTC))
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
    else:
        object.__setattr__(result, "status", TaskResultStatus.READY)
    return final


def run_sync(payload: Any) -> Any:
    """Run a sync Django task in this worker thread."""
    attempt = prepare(payload)
    close_old_connections()  # a pooled thread may hold a connection the database dropped
    try:
        task_started.send(sender=DtqBackend, task_result=attempt.result)
        # given_up(): the worker ended this attempt while the function ran (its timeout, a cancel,
        # the drain) and recorded that end itself; what the function did is dropped, so it must
        # not be announced either.
        try:
            value = _succeeded(attempt, attempt.task.call(*attempt.call_args, **attempt.call_kwargs))
        except _NOT_OUTCOMES:
            raise
        except BaseException as exc:  # any other BaseException fails the task, as in Django
            if _failed(attempt, exc) and not given_up():
                task_finished.send(sender=DtqBackend, task_result=attempt.result)
            raise
        if not given_up():
            task_finished.send(sender=DtqBackend, task_result=attempt.result)
        return value
    finally:
        close_old_connections()


async def run_async(payload: Any) -> Any:
    """Run a coroutine Django task on the worker's event loop."""
    attempt = await asyncio.to_thread(prepare, payload)  # blocking import and Redis call
    await task_started.asend(sender=DtqBackend, task_result=attempt.result)
    try:
        value = _succeeded(attempt, await attempt.task.acall(*attempt.call_args, **attempt.call_kwargs))
    except (*_NOT_OUTCOMES, asyncio.CancelledError):  # CancelledError: a timeout, a cancel or the drain
        raise
    except BaseException as exc:  # any other BaseException fails the task, as in Django
        if _failed(attempt, exc):
            await task_finished.asend(sender=DtqBackend, task_result=attempt.result)
        raise
    await task_finished.asend(sender=DtqBackend, task_result=attempt.result)
    return value


registry.register(SYNC_TYPE, run_sync)
registry.register(ASYNC_TYPE, run_async)
