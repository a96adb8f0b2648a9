"""Django task functions the real worker processes import by module path in these tests."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path
from typing import Any

import redis

from dtq_core.django_tasks.compat import task, task_finished, task_started
from dtq_tasks import RateLimited, RetryableError

SIGNAL_LOG_ENV = "DTQ_TEST_SIGNAL_LOG"  # set on a worker: its task signals are appended here


@task
def add(a: int, b: int) -> int:
    return a + b


@task
async def aadd(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task
def nap(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@task
async def anap(seconds: float) -> float:
    await asyncio.sleep(seconds)
    return seconds


@task(takes_context=True)
def whoami(context: Any, value: Any) -> dict[str, Any]:
    result = context.task_result
    return {"attempt": context.attempt, "id": result.id, "worker_ids": result.worker_ids, "value": value,
            "status": str(result.status), "queue": result.task.queue_name, "priority": result.task.priority}


@task(takes_context=True)
async def flaky(context: Any, fail_times: int) -> dict[str, Any]:
    if context.attempt <= fail_times:
        raise RetryableError(f"planned failure {context.attempt} of {fail_times}")
    return {"attempt": context.attempt, "errors": len(context.task_result.errors)}


@task(takes_context=True)
def stall_first(context: Any) -> list[str]:
    """Hang on attempt 1 (the test kills that worker), then report the workers per attempt."""
    if context.attempt == 1:
        time.sleep(60)
    return list(context.task_result.worker_ids)


@task
def nap_then_mark(seconds: float, mark: str) -> float:
    """Sleep (past a timeout, or through a cancel: the worker gives up on it), then leave the file
    `mark` just before returning."""
    time.sleep(seconds)
    Path(mark).write_text("returned")
    return seconds


@task(takes_context=True)
def redis_down_once(context: Any, flag: str) -> dict[str, Any]:
    """Meet a Redis outage of the task's own (its cache is down) the first time, then succeed."""
    if not Path(flag).exists():
        Path(flag).write_text("x")
        raise redis.ConnectionError("cache redis is down")
    return {"attempt": context.attempt}


@task(takes_context=True)
def rate_limited_once(context: Any, flag: str) -> dict[str, Any]:
    """Hit a rate limit the first time (not an attempt), then succeed."""
    if not Path(flag).exists():
        Path(flag).write_text("x")
        raise RateLimited("429 from the provider", retry_after=0.2)
    return {"attempt": context.attempt}


@task(takes_context=True)
def retry_until_flag(context: Any, flag: str) -> dict[str, Any]:
    """Raise RetryableError until the file `flag` exists."""
    if not Path(flag).exists():
        raise RetryableError(f"not yet (attempt {context.attempt})")
    return {"attempt": context.attempt, "worker_ids": list(context.task_result.worker_ids)}


@task
def boom(message: str) -> None:
    raise ValueError(message)


@task
def unserialisable() -> object:
    return object()


@task
def returns_tuple() -> Any:
    return {"pair": (1, 2), "bytes": b"ok"}


class PaymentError(Exception):
    """The importable base of a client library's nested errors."""


class PaymentClient:
    """A client library whose errors are nested in it (requests/boto style: Client.Error)."""

    class Declined(PaymentError):
        pass


@task
def charge(order_id: int) -> None:
    raise PaymentClient.Declined(f"card declined for order {order_id}")


class Abort(BaseException):
    """A BaseException that is not an Exception (like GeneratorExit, or a library's 'stop now')."""


@task
def abort(order_id: int) -> None:
    raise Abort(f"aborted order {order_id}")


@task
async def aabort(order_id: int) -> None:
    raise Abort(f"aborted order {order_id}")


def _log_signal(name: str, task_result: Any) -> None:
    path = os.environ.get(SIGNAL_LOG_ENV)
    if path:
        with open(path, "a") as log:
            log.write(json.dumps({"signal": name, "id": task_result.id, "status": str(task_result.status),
                                  "worker_ids": task_result.worker_ids,
                                  "errors": [e.exception_class_path for e in task_result.errors]}) + "\n")


def _on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log_signal("task_started", task_result)


def _on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _log_signal("task_finished", task_result)


task_started.connect(_on_started, dispatch_uid="tests.django_tasks.started")
task_finished.connect(_on_finished, dispatch_uid="tests.django_tasks.finished")
