"""Handlers real worker processes load through DTQ_TASK_MODULES=tests.workflows.handlers. Each
records what it ran with in a log under the test's key prefix (a hash task id -> runs, a list of
the inputs it received), so a test can tell a duplicate execution from a redelivered attempt."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import random
import signal
import threading
from typing import Any

import redis

import dtq_tasks
from dtq_core.conf import get_engine
from dtq_core.connection import sync_client

_client: redis.Redis | None = None


_client_lock = threading.Lock()


def client() -> redis.Redis:
    """The handlers' own Redis client, with a patient timeout: the request path's 1 s would turn a
    busy test machine into a handler error (a redis TimeoutError in place of the test's own).
    Made once, under a lock: two handler threads that both made one left the first to the garbage
    collector, whose close of its pool broke the other thread's call mid-read ("Bad file
    descriptor", or a read timeout), and a step failed with that instead of its own error."""
    global _client
    with _client_lock:
        if _client is None:
            _client = sync_client(dataclasses.replace(get_engine().config, redis_timeout_s=15))
        return _client


def _patiently(read: Any) -> Any:
    """A read retried through a timeout or two: the gate's answer must be the test's, not the
    machine's (a loaded CI host once timed one out, and the step failed with that instead)."""
    for _ in range(4):
        try:
            return read()
        except redis.exceptions.TimeoutError:
            continue
    return read()


def log_key(name: str) -> str:
    return f"{get_engine().keys.prefix}:testlog:{name}"


def _record(kind: str) -> dtq_tasks.TaskContext:
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    pipe = client().pipeline(transaction=False)
    pipe.hincrby(log_key("execs"), ctx.task_id, 1)
    pipe.rpush(log_key(kind), json.dumps({"task_id": ctx.task_id, "step": ctx.workflow_step,
                                          "workflow_id": ctx.workflow_id, "parent": ctx.parent_result}))
    pipe.execute()
    return ctx


@dtq_tasks.task("wf.inc")
def inc(payload: dict[str, Any]) -> int:
    """A chain step: its predecessor's result (0 for the first) plus n."""
    ctx = _record("inc")
    return int(ctx.parent_result or 0) + int(payload.get("n", 1))


@dtq_tasks.task("wf.num")
async def num(payload: dict[str, Any]) -> int:
    """A group member: returns n, after an optional random pause; may SIGKILL its own worker
    (kill_rate: the chance per run, while the flag key `kill` exists)."""
    _record("num")
    if payload.get("pause"):
        await asyncio.sleep(random.uniform(0, float(payload["pause"])))
    if payload.get("kill_rate") and client().exists(log_key("kill")) and \
            random.random() < float(payload["kill_rate"]):
        os.kill(os.getpid(), signal.SIGKILL)
    return int(payload["n"])


@dtq_tasks.task("wf.sum")
def total(payload: dict[str, Any]) -> int:
    """A group's `then`: the sum of its members' results."""
    ctx = _record("sum")
    return sum(int(v) for v in ctx.parent_result)


@dtq_tasks.task("wf.gate")
def gate(payload: dict[str, Any]) -> int:
    """Fails until the test sets the key `open` (then passes its input on, plus n)."""
    ctx = _record("gate")
    if not _patiently(lambda: client().exists(log_key("open"))):
        raise ValueError("the gate is closed")
    return int(ctx.parent_result or 0) + int(payload.get("n", 1))


@dtq_tasks.task("wf.slow")
async def slow(payload: dict[str, Any]) -> None:
    _record("slow")
    await asyncio.sleep(float(payload.get("seconds", 30)))


@dtq_tasks.task("wf.echo_parent")
def echo_parent(payload: dict[str, Any]) -> Any:
    return _record("echo").parent_result
