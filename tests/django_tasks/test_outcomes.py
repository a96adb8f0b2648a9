"""What the runner tells Django about an attempt, against what the worker then does with it:
task_finished only for a final outcome (by the worker's retry rule), never for an attempt the
worker gave up on, and TaskContext.attempt / TaskResult.attempts equal to dtq's attempt number."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import redis

from dtq_core.django_tasks import DtqBackend, runner
from dtq_core.django_tasks.compat import TaskResult, TaskResultStatus
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq_selection import DlqSelection
from dtq_core.keys import tag_of
from dtq_core.worker.executor import Execution, HandlerTimeout, Row, _in_thread, given_up
from dtq_tasks import RateLimited, RetryableError

from ..conftest import WorkerProcess, wait_for
from . import tasks_module as tm
from .conftest import BACKEND
from .test_worker import burst


def signals_for(log: Path, task_id: str) -> list[tuple[str, str]]:
    """The task signals a worker logged for one task (tasks_module.SIGNAL_LOG_ENV), in order."""
    if not log.exists():
        return []
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    return [(r["signal"], r["status"]) for r in rows if r["id"] == task_id]


def _attempt(*, last: bool) -> runner.Attempt:
    now = datetime.now(tz=UTC)
    result: TaskResult[Any] = TaskResult(
        task=tm.add, id="t", status=TaskResultStatus.RUNNING, enqueued_at=now, started_at=now, finished_at=None,
        last_attempted_at=now, args=[1, 2], kwargs={}, backend="default", errors=[], worker_ids=["w"])
    return runner.Attempt(task=tm.add, result=result, call_args=[1, 2], call_kwargs={}, final_on_error=last)


@pytest.mark.parametrize("exc,final_before_the_last", [
    (ValueError("bad input"), True),
    (RetryableError("busy"), False),
    (HandlerTimeout("slow"), False),
    (redis.ConnectionError("cache down"), False),
    (redis.TimeoutError("cache slow"), False),
    (redis.ResponseError("MISCONF disk full"), False),
    (redis.ResponseError("WRONGTYPE"), True),
])
def test_an_error_is_final_by_the_worker_s_own_retry_rule(exc: Exception, final_before_the_last: bool) -> None:
    # It should: task_finished(FAILED) goes out exactly when dtq will not run the task again.
    attempt = _attempt(last=False)
    assert runner._failed(attempt, exc) is final_before_the_last
    expected = TaskResultStatus.FAILED if final_before_the_last else TaskResultStatus.READY
    assert attempt.result.status == expected and len(attempt.result.errors) == 1
    last = _attempt(last=True)
    assert runner._failed(last, exc) is True and last.result.status == TaskResultStatus.FAILED


@pytest.mark.parametrize("last", [False, True])
def test_rate_limited_is_never_final_and_no_error(last: bool) -> None:
    # It should: RateLimited is not an attempt (the task waits and runs it again), not a failure.
    attempt = _attempt(last=last)
    assert runner._failed(attempt, RateLimited("429", retry_after=1)) is False
    assert attempt.result.errors == [] and attempt.result.status == TaskResultStatus.READY


def test_given_up_reads_the_flag_of_the_attempt_the_calling_thread_runs() -> None:
    row = Row(entry_id="1-0", stream="s", task_id="t", attempt=1, max_attempts=1, type="x", payload="",
              timeout_s=1.0, queue="default", priority="normal")
    ex = Execution(row)
    seen: list[bool] = []

    def handler(payload: Any) -> None:
        seen.append(given_up())

    _in_thread(ex, handler, None)
    ex.settled = True  # what HandlerThreads.give_up sets on a timeout, a cancel or the drain
    _in_thread(ex, handler, None)
    assert seen == [False, True]
    assert given_up() is False  # outside a handler thread's attempt


def test_a_redis_error_in_a_task_is_retried_with_no_task_finished_for_it(
        backend: DtqBackend, start_worker: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    # docs/django-tasks.md: Redis connection errors retry; task_finished is not sent for an
    # attempt that will be retried.
    log = tmp_path / "signals.jsonl"
    result = tm.redis_down_once.enqueue(str(tmp_path / "flag"))
    burst(start_worker, DTQ_TEST_SIGNAL_LOG=str(log))
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"attempt": 2} and result.attempts == 2
    assert [e.exception_class_path for e in result.errors] == ["redis.exceptions.ConnectionError"]
    assert signals_for(log, result.id) == [
        ("task_started", "RUNNING"), ("task_started", "RUNNING"), ("task_finished", "SUCCESSFUL")]


def test_rate_limited_on_the_last_attempt_sends_no_task_finished(
        tasks_settings: Any, start_worker: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    # docs/tasks.md: RateLimited is not a failure (not an attempt, never the DLQ, no errors entry).
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {"MAX_ATTEMPTS": 1}}}
    log = tmp_path / "signals.jsonl"
    result = tm.rate_limited_once.enqueue(str(tmp_path / "flag"))
    burst(start_worker, DTQ_TEST_SIGNAL_LOG=str(log))
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == {"attempt": 1} and result.attempts == 1 and result.errors == []
    assert signals_for(log, result.id) == [
        ("task_started", "RUNNING"), ("task_started", "RUNNING"), ("task_finished", "SUCCESSFUL")]


def test_after_a_dlq_retry_the_attempt_count_starts_again_with_dtq_s(
        tasks_settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    # docs/django-tasks.md: one worker id per attempt, so TaskResult.attempts and
    # TaskContext.attempt equal dtq's attempt number; a DLQ retry starts both again at 1.
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {"MAX_ATTEMPTS": 2}}}
    flag = tmp_path / "flag"
    result = tm.retry_until_flag.enqueue(str(flag))
    burst(start_worker)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.worker_ids == ["w1", "w1"]
    flag.write_text("x")
    assert live_engine.dlq.retry(DlqSelection(task_ids=(result.id,)), Actor.cli()) == 1
    result.refresh()
    assert result.status == TaskResultStatus.READY and result.worker_ids == [] and result.attempts == 0
    burst(start_worker)
    stored = live_engine.tasks.get(result.id)
    assert stored["status"] == "SUCCEEDED" and stored["attempt"] == 1
    result.refresh()
    assert result.return_value == {"attempt": 1, "worker_ids": ["w1"]}
    assert result.attempts == 1 and result.worker_ids == ["w1"]
    # The earlier run's errors stay: they are dtq's error list.
    assert [e.exception_class_path for e in result.errors] == ["dtq_tasks.RetryableError"] * 2


def test_the_worker_record_is_cut_to_the_running_attempt(backend: DtqBackend, live_engine: Engine,
                                                         redis_client: redis.Redis) -> None:
    # It should: a list longer than the attempt (a run before a DLQ retry, written by an older
    # dtq that did not empty it) loses its tail, so worker_ids has one entry per attempt.
    result = tm.add.enqueue(1, 2)
    key = live_engine.keys.task(result.id)
    redis_client.hset(key, mapping={"status": "RUNNING", "attempt": "2", "entry_id": "2000-0",
                                    "django_worker_ids": '["a", "b", "c"]', "started_at": "1700000000000"})
    reply = live_engine.scripts("recordDjangoAttempt", keys=[live_engine.keys.partition(tag_of(result.id))],
                                args=[result.id, 2, "w-now", "2000-0"])
    assert json.loads(reply[0]) == ["a", "w-now"]
    assert json.loads(redis_client.hget(key, "django_worker_ids")) == ["a", "w-now"]


def test_a_timed_out_sync_task_that_returns_later_sends_no_task_finished(
        tasks_settings: Any, live_engine: Engine, start_worker: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    # docs/django-tasks.md: an attempt interrupted by a timeout sends no task_finished; a sync
    # function keeps running in its thread and its outcome is dropped.
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"],
                                        "OPTIONS": {"MAX_ATTEMPTS": 1, "TIMEOUT_SECONDS": 0.5}}}
    log, mark = tmp_path / "signals.jsonl", tmp_path / "returned"
    result = tm.nap_then_mark.enqueue(2.0, str(mark))
    worker = start_worker("--name", "w1", DTQ_TEST_SIGNAL_LOG=str(log))
    wait_for(lambda: live_engine.tasks.get(result.id)["status"] == "DEAD_LETTERED", timeout=60,
             message=worker.output)
    assert not mark.exists()  # given up on while the function still ran
    wait_for(mark.exists, timeout=60, message=worker.output)
    time.sleep(1.0)  # the runner's send, were there one, follows the return at once
    worker.kill()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "dtq_core.executor.HandlerTimeout"
    assert signals_for(log, result.id) == [("task_started", "RUNNING")]


def test_a_cancelled_sync_task_that_returns_later_sends_no_task_finished(
        backend: DtqBackend, live_engine: Engine, start_worker: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    # docs/django-tasks.md: an attempt interrupted by a cancel sends no task_finished (dtq ends
    # the task CANCELLED); the function runs on in its thread and its outcome is dropped.
    log, mark = tmp_path / "signals.jsonl", tmp_path / "returned"
    result = tm.nap_then_mark.enqueue(3.0, str(mark))
    worker = start_worker("--name", "w1", DTQ_TEST_SIGNAL_LOG=str(log))
    wait_for(lambda: live_engine.tasks.get(result.id)["status"] == "RUNNING", timeout=60, message=worker.output)
    live_engine.tasks.cancel(result.id, Actor.cli())
    wait_for(lambda: live_engine.tasks.get(result.id)["status"] == "CANCELLED", timeout=60, message=worker.output)
    assert not mark.exists()  # cancelled while the function still ran
    wait_for(mark.exists, timeout=60, message=worker.output)
    time.sleep(1.0)  # the runner's send, were there one, follows the return at once
    worker.kill()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "dtq_core.django_tasks.results.TaskCancelled"
    assert signals_for(log, result.id) == [("task_started", "RUNNING")]


def test_a_base_exception_that_is_not_an_exception_fails_the_task_with_task_finished(
        backend: DtqBackend, live_engine: Engine, start_worker: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    # docs/django-tasks.md "What the worker records": as in Django's ImmediateBackend, any
    # BaseException but KeyboardInterrupt and SystemExit fails the task, and task_finished says so.
    log = tmp_path / "signals.jsonl"
    sync, coro = tm.abort.enqueue(3), tm.aabort.enqueue(4)
    burst(start_worker, DTQ_TEST_SIGNAL_LOG=str(log))
    for result in (sync, coro):
        result.refresh()
        assert result.status == TaskResultStatus.FAILED
        assert result.errors[-1].exception_class is tm.Abort
        assert live_engine.tasks.get(result.id)["status"] == "DEAD_LETTERED"
        assert signals_for(log, result.id) == [("task_started", "RUNNING"), ("task_finished", "FAILED")]


def test_a_nested_exception_class_is_recorded_as_its_nearest_importable_base(
        backend: DtqBackend, start_worker: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    # docs/django-tasks.md "Status mapping": every exception_class_path is importable, so
    # TaskError.exception_class works; import_string cannot reach PaymentClient.Declined.
    log = tmp_path / "signals.jsonl"
    result = tm.charge.enqueue(7)
    burst(start_worker, DTQ_TEST_SIGNAL_LOG=str(log))
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class_path == "tests.django_tasks.tasks_module.PaymentError"
    assert error.exception_class is tm.PaymentError
    assert "PaymentClient.Declined: card declined for order 7" in error.traceback
    # task_finished's TaskResult, in the worker, carries the same path.
    (finished,) = [s for s in map(json.loads, log.read_text().splitlines()) if s["signal"] == "task_finished"]
    assert finished["status"] == "FAILED" and finished["errors"] == [error.exception_class_path]
