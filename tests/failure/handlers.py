"""Handlers real worker processes load through DTQ_TASK_MODULES=tests.failure.handlers.

Every handler records each execution in a side-effect log (a hash task id -> runs), so a test
can tell a redelivered attempt from a duplicate execution. Some handlers inject faults from
inside the worker: they SIGKILL their own process at a chosen moment.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import time
from typing import Any

import dtq_tasks
from dtq_core.clock import SystemClock
from dtq_core.conf import get_engine
from dtq_core.keys import tag_of
from dtq_core.registry import current_task
from dtq_tasks import once

# idempotent_operation waits for a lease left by a crashed holder to expire before running fn
# again. Its 60 s default would stall the chaos run; fn here is one script call, far below 5 s.
once.LEASE_S = 5.0

# Applies the chaos side effect and marks the operation done in one atomic step, so a crash can
# never fall between the two: with this, idempotent_operation's "at most once" has no window.
# The marker is what dtq_tasks.once writes on success ({"done": true, "result": ...}).
_EFFECT = """
local marker = redis.call('GET', KEYS[1])
if marker and cjson.decode(marker)['done'] then return 0 end
redis.call('HINCRBY', KEYS[2], ARGV[1], 1)
redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
return 1
"""


def log_key(name: str) -> str:
    """A test log key under the test's prefix (the key_prefix fixture deletes it afterwards)."""
    return f"{get_engine().keys.prefix}:testlog:{name}"


def _record() -> tuple[str, int]:
    ctx = current_task()
    assert ctx is not None
    client = get_engine().client
    pipe = client.pipeline(transaction=False)
    pipe.hincrby(log_key("execs"), ctx.task_id, 1)
    pipe.rpush(log_key("runs"), f"{ctx.task_id}|{ctx.attempt}|{ctx.worker_id}|{os.getpid()}")
    pipe.execute()
    return ctx.task_id, ctx.attempt


def _seconds(payload: dict[str, Any], attempt: int) -> float:
    return float(payload.get("by_attempt", {}).get(str(attempt), payload.get("seconds", 0)))


@dtq_tasks.task("failure.work")
def work(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the run, sleep (per attempt when asked) in a thread, return who ran it."""
    _, attempt = _record()
    time.sleep(_seconds(payload, attempt))
    return {"attempt": attempt, "pid": os.getpid()}


@dtq_tasks.task("failure.timed")
def timed(payload: dict[str, Any]) -> dict[str, Any]:
    """As failure.work, and log when this attempt's handler started and ended (wall clock, every
    worker on one host), so that a test can tell whether two attempts of a task overlapped."""
    task_id, attempt = _record()
    client = get_engine().client
    client.rpush(log_key("spans"), f"{task_id}|{attempt}|start|{time.time()}")
    try:
        time.sleep(_seconds(payload, attempt))
    finally:
        client.rpush(log_key("spans"), f"{task_id}|{attempt}|end|{time.time()}")
    return {"attempt": attempt, "pid": os.getpid()}


@dtq_tasks.task("failure.awork")
async def awork(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the run, sleep (per attempt when asked) on the event loop, return who ran it."""
    _, attempt = await asyncio.to_thread(_record)
    await asyncio.sleep(_seconds(payload, attempt))
    return {"attempt": attempt, "pid": os.getpid()}


@dtq_tasks.task("failure.kill_self")
def kill_self(payload: dict[str, Any]) -> None:
    """Poison that takes its worker down: SIGKILL the own process on every attempt."""
    _record()
    os.kill(os.getpid(), signal.SIGKILL)


@dtq_tasks.task("failure.crash_after_write")
def crash_after_write(payload: dict[str, Any]) -> dict[str, Any]:
    """Write the attempt's outcome to the task hash as a completion would, then SIGKILL the process
    before the entry is acknowledged (the first attempt only; later attempts just succeed).

    dtq writes the hash and XACKs in one script, so a real crash cannot land between them; this
    handler builds that state anyway to prove redelivery absorbs it instead of running again.
    """
    task_id, attempt = _record()
    if attempt > 1:
        return {"attempt": attempt}
    engine = get_engine()
    now = SystemClock().now_ms()
    pipe = engine.client.pipeline(transaction=True)
    if payload.get("outcome") == "retrying":
        due = now + 200
        pipe.hset(engine.keys.task(task_id), mapping={"status": "RETRYING", "due_at": due, "updated_at": now})
        pipe.zadd(engine.keys.schedule(tag_of(task_id)), {task_id: due})
    else:
        pipe.hset(engine.keys.task(task_id), mapping={"status": "SUCCEEDED", "finished_at": now, "updated_at": now})
        pipe.set(engine.keys.result(task_id), json.dumps({"attempt": attempt}))
    pipe.zrem(engine.keys.running(tag_of(task_id)), task_id)
    pipe.execute()
    os.kill(os.getpid(), signal.SIGKILL)
    raise AssertionError("unreachable")


@dtq_tasks.task("failure.chaos")
def chaos(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the run, work a little, then apply a side effect through idempotent_operation."""
    task_id, attempt = _record()
    time.sleep(random.uniform(0.02, 0.12))
    engine = get_engine()
    op_key = f"chaos:{task_id}"
    result = {"task": task_id}
    marker = json.dumps({"done": True, "result": result})

    def effect() -> dict[str, Any]:
        engine.client.eval(_EFFECT, 2, engine.keys.operation(op_key), log_key("effects"), task_id, marker,
                           engine.config.idem_ttl_s * 1000)
        return result

    return {"effect": dtq_tasks.idempotent_operation(op_key, effect), "attempt": attempt}


@dtq_tasks.task("failure.flaky")
def flaky(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the run; fail retryably on each attempt listed in payload["retry_after"] (attempt ->
    seconds until the next one, the task waiting in the schedule as RETRYING), succeed on others."""
    _, attempt = _record()
    retry_after = payload.get("retry_after", {}).get(str(attempt))
    if retry_after is not None:
        raise dtq_tasks.RetryableError(f"attempt {attempt} fails", retry_after=retry_after)
    return {"attempt": attempt}


@dtq_tasks.task("failure.gated")
def gated(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the run, wait until the test opens the payload's gate, log that, then fail or return."""
    task_id, _ = _record()
    client = get_engine().client
    deadline = time.monotonic() + 60
    while not client.exists(log_key(f"gate:{payload['gate']}")) and time.monotonic() < deadline:
        time.sleep(0.01)
    client.rpush(log_key("finished"), task_id)
    if payload.get("fail"):
        raise RuntimeError(payload["fail"])
    return {"gate": payload["gate"]}


@dtq_tasks.task("failure.write_late")
def write_late(payload: dict[str, Any]) -> dict[str, Any]:
    """Record the run, sleep (per attempt when asked), then write to Redis: a handler whose own
    write meets whatever happened to Redis meanwhile (a full disk)."""
    task_id, attempt = _record()
    time.sleep(_seconds(payload, attempt))
    get_engine().client.hincrby(log_key("effects"), task_id, 1)
    return {"attempt": attempt, "pid": os.getpid()}
