"""ctx.progress() (issue 23): a handler's reports reach its task record and the events channel,
rate-limited, fenced on the attempt, from sync and async handlers run by a real worker."""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq_selection import DlqSelection
from dtq_core.keys import tag_of
from dtq_core.registry import TaskContext
from dtq_core.scripts import Scripts

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST, Events

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.progress.handlers", "DTQ_PROGRESS_MIN_INTERVAL_S": 0.5}


def _release(client: redis.Redis, engine: Engine) -> None:
    client.set(f"{engine.keys.prefix}:testlog:release", "1")


def test_a_tight_loop_of_10000_reports_is_a_handful_of_writes_and_the_last_value_lands(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "p", "--queues", "prog", **ENV)
    with Events(redis_client, engine.keys) as events:
        task_id = engine.tasks.enqueue("progress.tight", {"n": 10000}, queue="prog").id
        started = time.monotonic()
        wait_for(lambda: (engine.tasks.get(task_id).get("progress") or {}).get("done") == 10000, timeout=20,
                 message=worker.output)
        task = engine.tasks.get(task_id)
        assert task["status"] == "RUNNING"
        assert task["progress"] == {"done": 10000, "total": 10000, "fraction": 1.0, "message": "row 10000",
                                    "updated_at": task["progress"]["updated_at"]}
        assert task["progress"]["updated_at"].endswith("Z")
        events.sync()
        elapsed = time.monotonic() - started
        reported = [e for e in events.seen if e.get("type") == "task.progress" and e.get("task_id") == task_id]
        # One write per 0.5 s at most: the loop's 10,000 calls are 1-3 writes, not 10,000.
        assert 1 <= len(reported) <= math.ceil(elapsed / 0.5) + 1, (len(reported), elapsed)
        assert reported[-1]["progress"] == {"done": 10000, "total": 10000, "message": "row 10000"}
        assert reported[-1]["queue"] == "prog" and reported[-1]["status"] == "RUNNING"
        _release(redis_client, engine)
        wait_for(lambda: engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=15, message=worker.output)
    # The finished record (compacted by retention) still says how far it got.
    assert engine.tasks.get(task_id)["progress"]["done"] == 10000


def test_an_async_handler_s_progress_moves_in_the_api_while_it_runs(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    worker = start_worker("--name", "p", "--queues", "prog", **ENV)
    task_id = engine.tasks.enqueue("progress.steps", {"steps": 5, "every": 0.4}, queue="prog").id
    seen: list[float] = []

    def advanced() -> bool:
        progress = api.get(f"/api/v1/tasks/{task_id}").json().get("progress")
        if progress and (not seen or progress["done"] != seen[-1]):
            seen.append(progress["done"])
        return bool(seen) and seen[-1] == 5

    wait_for(advanced, timeout=20, interval=0.05, message=worker.output)
    assert len(seen) >= 3 and seen == sorted(seen), seen  # seen moving up, step by step
    body = api.get(f"/api/v1/tasks/{task_id}").json()
    assert body["status"] == "RUNNING" and body["progress"]["message"] == "step 5 of 5"
    assert body["progress"]["fraction"] == 1.0
    _release(redis_client, engine)


def _report(redis_client: redis.Redis, engine: Engine, task_id: str, attempt: int, done: int,
            entry_id: str = "1000-0") -> int:
    return int(Scripts(redis_client)("reportProgress", keys=[engine.keys.partition(tag_of(task_id))],
                                     args=[engine.clock.now_ms(), "2026-12-05T00:00:00.000Z", 0,
                                           task_id, entry_id, str(attempt), str(done), "10", "m"]))


def test_the_script_writes_only_to_the_running_attempt(engine: Engine, redis_client: redis.Redis) -> None:
    task_id = engine.tasks.enqueue("dtq.echo", queue="fence").id
    key = engine.keys.task(task_id)
    assert _report(redis_client, engine, task_id, 1, 3) == 0  # QUEUED: nothing runs it
    redis_client.hset(key, mapping={"status": "RUNNING", "attempt": "1", "entry_id": "1000-0"})
    assert _report(redis_client, engine, task_id, 1, 3) == 1
    assert _report(redis_client, engine, task_id, 2, 9) == 0  # a stale or future attempt
    # The same attempt number under another stream entry: a run before a DLQ retry or a deferral
    assert _report(redis_client, engine, task_id, 1, 8, entry_id="999-0") == 0
    assert engine.tasks.get(task_id)["progress"]["done"] == 3
    redis_client.hset(key, "status", "SUCCEEDED")
    assert _report(redis_client, engine, task_id, 1, 7) == 0  # it ended: the end stands
    assert engine.tasks.get(task_id)["progress"]["done"] == 3
    assert _report(redis_client, engine, "t0-" + "0" * 32, 1, 1) == 0  # no such task: nothing created
    assert not redis_client.exists(engine.keys.task("t0-" + "0" * 32))


@pytest.mark.parametrize("args,error", [
    ((-1,), ValueError), ((float("nan"),), ValueError), ((float("inf"), 10), ValueError), (("3",), ValueError),
    ((True,), ValueError), ((1, 0), ValueError), ((1, -5), ValueError), ((1, float("nan")), ValueError),
    ((1, 10, 5), TypeError),
    # ints past a float's range: ValueError as documented, not float()'s OverflowError, and a
    # message that does not print (or fail to print: sys.get_int_max_str_digits) every digit
    ((10**400,), ValueError), ((1, 10**400), ValueError), ((10**5000,), ValueError), ((1, -(10**400)), ValueError),
])
def test_bad_progress_arguments_raise_in_the_handler(args: tuple[Any, ...], error: type[Exception]) -> None:
    ctx = TaskContext(task_id="t", attempt=1, max_attempts=3, queue="q", type="x", worker_id="w")
    with pytest.raises(error, match="progress"):
        ctx.progress(*args)


def test_progress_outside_a_worker_is_checked_and_goes_nowhere() -> None:
    ctx = TaskContext(task_id="t", attempt=1, max_attempts=3, queue="q", type="x", worker_id="w")
    ctx.progress(5, None, "x" * 1000)  # no reporter (a unit test calling the handler): no error


def test_a_message_with_a_lone_surrogate_is_written_with_a_replacement_character(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # docs/tasks.md "Progress": a character UTF-8 cannot hold is stored as '?'. It should not
    # make the worker's write (every report due with it) fail at every interval.
    engine = live_engine
    worker = start_worker("--name", "p", "--queues", "prog", **{**ENV, "DTQ_PROGRESS_MIN_INTERVAL_S": 0.2})
    task_id = engine.tasks.enqueue("progress.message", {"surrogate": True}, queue="prog").id
    other_id = engine.tasks.enqueue("progress.message", {"message": "plain"}, queue="prog").id
    try:
        wait_for(lambda: (engine.tasks.get(task_id).get("progress") or {}).get("message") == "file ?.csv",
                 timeout=20, message=worker.output)
        wait_for(lambda: (engine.tasks.get(other_id).get("progress") or {}).get("message") == "plain",
                 timeout=20, message=worker.output)
        assert engine.tasks.get(task_id)["status"] == "RUNNING"
        assert "not written" not in worker.output()
    finally:
        _release(redis_client, engine)


def _stale_written(engine: Engine, task_id: str, *, for_s: float) -> dict[str, Any] | None:
    """The task's progress if the stale run's 'stale' lands on it (RUNNING) within for_s, else None."""
    deadline = time.monotonic() + for_s
    while time.monotonic() < deadline:
        task = engine.tasks.get(task_id)
        if task["status"] == "RUNNING" and (task.get("progress") or {}).get("message") == "stale":
            return dict(task["progress"])
        time.sleep(0.05)
    return None


def test_a_timed_out_run_cannot_overwrite_the_progress_of_its_dlq_retried_run(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # docs/tasks.md "Progress": the write is fenced on the attempt's stream entry. Run 1 times
    # out (its sync thread goes on reporting 'stale' on the same worker) and is dead-lettered; the
    # DLQ retry runs it again as attempt 1, which reports 'fresh' once.
    engine = live_engine
    worker = start_worker("--name", "p", "--queues", "prog", "--concurrency", "2",
                          **{**ENV, "DTQ_PROGRESS_MIN_INTERVAL_S": 0.2})
    task_id = engine.tasks.enqueue("progress.stale", {}, queue="prog", max_attempts=1, timeout_seconds=1).id
    fresh_key = f"{engine.keys.prefix}:testlog:fresh:{task_id}"
    try:
        wait_for(lambda: engine.tasks.get(task_id)["status"] == "DEAD_LETTERED", timeout=30, message=worker.output)
        assert engine.dlq.retry(DlqSelection(task_ids=(task_id,)), Actor.cli()) == 1
        wait_for(lambda: redis_client.exists(fresh_key), timeout=30, message=worker.output)
        task = engine.tasks.get(task_id)
        assert task["status"] == "RUNNING" and task["attempt"] == 1
        # The retried run's one report is written, though the stale run reports all the while.
        wait_for(lambda: (engine.tasks.get(task_id).get("progress") or {}).get("message") == "fresh",
                 timeout=10, message=worker.output)
        assert _stale_written(engine, task_id, for_s=3) is None
    finally:
        _release(redis_client, engine)


def test_a_resumed_frozen_worker_cannot_overwrite_the_progress_of_the_peer_s_rerun(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # docs/tasks.md "Progress": a worker that lost its task to a peer cannot overwrite the new
    # attempt's progress. Worker a is frozen (SIGSTOP) mid-task; the task is reclaimed and
    # dead-lettered (WorkerLost, its only attempt), retried from the DLQ and run by worker b as
    # attempt 1 again; a is resumed (SIGCONT) and its handler goes on reporting.
    engine = live_engine
    a = start_worker("--name", "a", "--queues", "prog", **ENV)
    task_id = engine.tasks.enqueue("progress.stale", {}, queue="prog", max_attempts=1).id
    fresh_key = f"{engine.keys.prefix}:testlog:fresh:{task_id}"
    try:
        wait_for(lambda: (engine.tasks.get(task_id).get("progress") or {}).get("message") == "stale",
                 timeout=30, message=a.output)
        os.kill(a.pid, signal.SIGSTOP)
        b = start_worker("--name", "b", "--queues", "prog", **ENV)
        wait_for(lambda: engine.tasks.get(task_id)["status"] == "DEAD_LETTERED", timeout=30, message=b.output)
        assert engine.dlq.retry(DlqSelection(task_ids=(task_id,)), Actor.cli()) == 1
        wait_for(lambda: redis_client.exists(fresh_key), timeout=30, message=b.output)
        wait_for(lambda: (engine.tasks.get(task_id).get("progress") or {}).get("message") == "fresh",
                 timeout=10, message=b.output)
        os.kill(a.pid, signal.SIGCONT)
        assert _stale_written(engine, task_id, for_s=4) is None
        task = engine.tasks.get(task_id)
        assert task["status"] == "RUNNING" and task["attempt"] == 1
    finally:
        try:
            os.kill(a.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        _release(redis_client, engine)
