"""Middleware, handlers and signal receivers that real worker processes load for the integration
tests (DTQ_TASK_MODULES=tests.integrations.mw): a tenant carried from the enqueuer to the handler in
a header, as docs/tasks.md's example does, and everything they saw logged in Redis under the
test's key prefix."""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
from typing import Any

import dtq_tasks
from dtq_core.conf import get_engine
from dtq_tasks.signals import task_dead_lettered, task_failed, task_queued, task_started, task_succeeded

current_tenant: contextvars.ContextVar[str | None] = contextvars.ContextVar("tenant", default=None)


def log(name: str, **fields: Any) -> None:
    engine = get_engine()
    engine.client.rpush(f"{engine.keys.prefix}:testlog:{name}", json.dumps(fields, default=str))


class TenantHeader(dtq_tasks.EnqueueMiddleware):
    """Stamps the enqueuing code's tenant on the task; refuses tasks of a suspended tenant."""

    def before_enqueue(self, task: dtq_tasks.OutgoingTask) -> None:
        tenant = current_tenant.get()
        if tenant == "suspended":
            raise dtq_tasks.TaskRefused(f"tenant {tenant!r} may not enqueue {task.type}")
        if tenant is not None:
            task.headers["tenant"] = tenant


class TenantContext(dtq_tasks.ExecutionMiddleware):
    """Sets the tenant the task was enqueued for while its handler runs (sync and async)."""

    def before(self, ctx: dtq_tasks.TaskContext, payload: Any) -> None:
        current_tenant.set(ctx.headers.get("tenant"))

    def after(self, ctx: dtq_tasks.TaskContext, result: Any) -> None:
        log("after", task_id=ctx.task_id, result=result)

    def on_error(self, ctx: dtq_tasks.TaskContext, exc: BaseException) -> None:
        log("on_error", task_id=ctx.task_id, error=type(exc).__name__, message=str(exc))


class NotMiddleware:
    pass


@dtq_tasks.task("mw.whoami")
def whoami(payload: Any) -> Any:
    return {"tenant": current_tenant.get()}


@dtq_tasks.task("mw.awhoami")
async def awhoami(payload: Any) -> Any:
    await asyncio.sleep(0)
    return {"tenant": current_tenant.get()}


@dtq_tasks.task("mw.boom")
def boom(payload: Any) -> Any:
    raise dtq_tasks.RetryableError("boom for " + str(current_tenant.get()))


def _on(kind: str) -> Any:
    def receiver(sender: Any, **kwargs: Any) -> None:
        kwargs.pop("signal", None)
        if kwargs.get("exception") is not None:
            kwargs["exception"] = type(kwargs["exception"]).__name__
        kwargs.pop("context", None)
        log("signal", kind=kind, **kwargs)
    return receiver


def _raising(sender: Any, **kwargs: Any) -> None:
    raise RuntimeError("a receiver that fails")


RECEIVERS = {name: _on(name) for name in ("queued", "started", "succeeded", "failed", "dead_lettered")}
SIGNALS = {"queued": task_queued, "started": task_started, "succeeded": task_succeeded, "failed": task_failed,
           "dead_lettered": task_dead_lettered}


def connect() -> None:
    for name, signal in SIGNALS.items():
        signal.connect(RECEIVERS[name])
    task_started.connect(_raising)  # must be logged, never fail the task


def disconnect() -> None:
    for name, signal in SIGNALS.items():
        signal.disconnect(RECEIVERS[name])
    task_started.disconnect(_raising)


if os.environ.get("DTQ_TEST_SIGNALS"):  # the test's worker processes; the test process connects its own
    connect()


@dtq_tasks.task("enc.secret")
def secret(payload: Any) -> Any:
    """Hands back what it was given, as a result (encrypted in Redis when its type is)."""
    return {"got": payload}


@dtq_tasks.task("enc.asecret")
async def asecret(payload: Any) -> Any:
    return {"got": payload}


@dtq_tasks.task("enc.parent")
def parent(payload: Any) -> Any:
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    return {"parent": ctx.parent_result}


@dtq_tasks.task("plain.parent")
def plain_parent(payload: Any) -> Any:
    """As enc.parent, for a type that is not encrypted: its input and result are stored in clear."""
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    return {"parent": ctx.parent_result}
