"""Django tasks executed by real `manage.py runworker_dtq` processes against a real Redis."""

from __future__ import annotations

import contextvars
import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import redis
from django.test import Client

from dtq_core import registry
from dtq_core.django_tasks import DtqBackend, runner
from dtq_core.django_tasks.compat import InvalidTask, TaskResultStatus
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..conftest import WorkerProcess, wait_for
from . import tasks_module as tm

FAST_RETRIES = {"DTQ_RETRY_BASE_S": "0.01", "DTQ_RETRY_MAX_S": "0.05"}


def burst(start_worker: Callable[..., WorkerProcess], *args: str, **env: Any) -> WorkerProcess:
    worker = start_worker("--burst", "--name", "w1", *args, **{**FAST_RETRIES, **env})
    assert worker.wait(60) == 0, worker.output()
    return worker


def test_sync_and_async_tasks_succeed_with_their_records(backend: DtqBackend, live_engine: Engine,
                                                         start_worker: Callable[..., WorkerProcess],
                                                         tmp_path: Path) -> None:
    log = tmp_path / "signals.jsonl"
    sync, coro = tm.add.enqueue(2, 3), tm.aadd.enqueue(a=4, b=5)
    normalised, queued = tm.returns_tuple.enqueue(), tm.add.using(queue_name="emails").enqueue(1, 1)
    before = datetime.now(tz=UTC)
    burst(start_worker, DTQ_TEST_SIGNAL_LOG=str(log))
    for result, value in ((sync, 5), (coro, 9), (normalised, {"pair": [1, 2], "bytes": "ok"}), (queued, 2)):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
        assert result.return_value == value and result.worker_ids == ["w1"] and result.attempts == 1
        assert result.errors == [] and result.enqueued_at <= before
        assert before <= result.started_at == result.last_attempted_at <= result.finished_at
    assert live_engine.tasks.get(queued.id)["queue"] == "emails"
    signals = [json.loads(line) for line in log.read_text().splitlines()]
    # It should send task_started (RUNNING) then task_finished (SUCCESSFUL), once each, per task.
    for result in (sync, coro):
        mine = [(s["signal"], s["status"], s["worker_ids"]) for s in signals if s["id"] == result.id]
        assert mine == [("task_started", "RUNNING", ["w1"]), ("task_finished", "SUCCESSFUL", ["w1"])]


def test_context_carries_the_attempt_and_retries_count_workers(backend: DtqBackend,
                                                               start_worker: Callable[..., WorkerProcess]) -> None:
    plain = tm.whoami.using(priority=20).enqueue("hello")
    flaky = tm.flaky.enqueue(2)
    burst(start_worker)
    plain.refresh()
    assert plain.return_value == {"attempt": 1, "id": plain.id, "worker_ids": ["w1"], "value": "hello",
                                  "status": "RUNNING", "queue": "default", "priority": 20}
    flaky.refresh()
    assert flaky.status == TaskResultStatus.SUCCESSFUL, flaky.errors
    # Two RetryableErrors, then success on attempt 3: the context saw both earlier errors.
    assert flaky.return_value == {"attempt": 3, "errors": 2}
    assert flaky.worker_ids == ["w1", "w1", "w1"] and flaky.attempts == 3
    assert [e.exception_class_path for e in flaky.errors] == ["dtq_tasks.RetryableError"] * 2
    assert "planned failure 1 of 2" in flaky.errors[0].traceback
    assert flaky.started_at < flaky.last_attempted_at <= flaky.finished_at


def test_an_exception_fails_the_task_with_its_class_path_and_traceback(
        backend: DtqBackend, live_engine: Engine, start_worker: Callable[..., WorkerProcess],
        tmp_path: Path) -> None:
    log = tmp_path / "signals.jsonl"
    failed, bad_return = tm.boom.enqueue("kaput"), tm.unserialisable.enqueue()
    burst(start_worker, DTQ_TEST_SIGNAL_LOG=str(log))
    failed.refresh()
    assert failed.status == TaskResultStatus.FAILED and failed.finished_at is not None
    (error,) = failed.errors
    assert error.exception_class_path == "builtins.ValueError" and error.exception_class is ValueError
    assert "ValueError: kaput" in error.traceback and "tasks_module.py" in error.traceback
    assert live_engine.tasks.get(failed.id)["status"] == "DEAD_LETTERED"  # one attempt: permanent
    bad_return.refresh()
    assert bad_return.status == TaskResultStatus.FAILED
    assert bad_return.errors[-1].exception_class_path == "builtins.TypeError"
    finished = [json.loads(line) for line in log.read_text().splitlines() if failed.id in line]
    assert [(s["signal"], s["status"]) for s in finished] == [("task_started", "RUNNING"), ("task_finished", "FAILED")]


def test_priorities_run_high_before_normal_before_low(backend: DtqBackend,
                                                      start_worker: Callable[..., WorkerProcess]) -> None:
    low = [tm.nap.using(priority=-10).enqueue(0.02) for _ in range(2)]
    normal = [tm.nap.enqueue(0.02) for _ in range(2)]
    high = [tm.nap.using(priority=10).enqueue(0.02) for _ in range(2)]
    burst(start_worker, "--concurrency", "1")
    for result in (*low, *normal, *high):
        result.refresh()
        assert result.status == TaskResultStatus.SUCCESSFUL
    # One slot: they ran one after another, so each finished before the next one started. (A row
    # claimed ahead of the busy slot, the worker's backlog, is stamped started at its claim: the
    # next priority's first task can share the last one's started_at millisecond.)
    assert max(r.finished_at for r in high) < min(r.finished_at for r in normal)
    assert max(r.finished_at for r in normal) < min(r.finished_at for r in low)
    assert max(r.started_at for r in high) <= min(r.started_at for r in normal)
    assert max(r.started_at for r in normal) <= min(r.started_at for r in low)


def test_a_deferred_task_runs_after_run_after(backend: DtqBackend, live_engine: Engine,
                                              start_worker: Callable[..., WorkerProcess]) -> None:
    when = datetime.now(tz=UTC) + timedelta(seconds=1.5)
    result = tm.add.using(run_after=when).enqueue(1, 2)
    worker = start_worker("--name", "w1")
    wait_for(lambda: live_engine.tasks.get(result.id)["status"] == "SUCCEEDED", timeout=20, message=worker.output())
    worker.kill()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL and result.return_value == 3
    assert result.started_at >= when - timedelta(milliseconds=5)


def test_a_running_task_reads_running_and_a_cancel_fails_it(backend: DtqBackend, live_engine: Engine,
                                                             start_worker: Callable[..., WorkerProcess]) -> None:
    result = tm.anap.enqueue(30)
    worker = start_worker("--name", "w1")
    wait_for(lambda: tm.anap.get_result(result.id).status == TaskResultStatus.RUNNING, message=worker.output())
    running = tm.anap.get_result(result.id)
    assert running.worker_ids == ["w1"] and running.started_at is not None and running.finished_at is None
    live_engine.tasks.cancel(result.id, Actor.cli())
    wait_for(lambda: tm.anap.get_result(result.id).is_finished, message=worker.output())
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[-1].exception_class_path == "dtq_core.django_tasks.results.TaskCancelled"


def test_bad_payloads_sent_around_the_backend_dead_letter(live_engine: Engine, redis_client: redis.Redis,
                                                          start_worker: Callable[..., WorkerProcess]) -> None:
    missing = live_engine.tasks.enqueue("django.task", {"module_path": "tests.django_tasks.nowhere.add", "args": []}).id
    not_a_task = live_engine.tasks.enqueue("django.task", {"module_path": "json.dumps", "args": [1]}).id
    malformed = live_engine.tasks.enqueue("django.atask", {"module_path": 5}).id
    burst(start_worker)
    for task_id, error in ((missing, "ModuleNotFoundError"), (not_a_task, InvalidTask.__name__),
                           (malformed, "MalformedPayload")):
        stored = live_engine.tasks.get(task_id)
        assert stored["status"] == "DEAD_LETTERED" and stored["attempt"] == 1
        assert stored["errors"][0]["error"].endswith(error), stored["errors"]


def test_a_killed_worker_s_task_reruns_elsewhere_and_records_both_workers(
        backend: DtqBackend, live_engine: Engine, redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    fast = {"DTQ_VISIBILITY_TIMEOUT_S": "1", "DTQ_HEARTBEAT_INTERVAL_S": "0.2"}
    result = tm.stall_first.enqueue()
    first = start_worker("--name", "w1", **fast)
    # Wait for the runner to have recorded attempt 1 (just after the claim made it RUNNING).
    wait_for(lambda: redis_client.hget(live_engine.keys.task(result.id), "django_worker_ids") == '["w1"]',
             message=first.output())
    first.kill()  # SIGKILL mid-attempt: no completion is ever written
    second = start_worker("--name", "w2", **fast)
    wait_for(lambda: tm.stall_first.get_result(result.id).is_finished, timeout=30, message=second.output())
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
    assert result.return_value == ["w1", "w2"] and result.worker_ids == ["w1", "w2"]
    assert [e.exception_class.__name__ for e in result.errors] == ["WorkerLost"]
    assert result.started_at < result.last_attempted_at


def test_a_stale_runner_of_an_earlier_entry_records_nothing(backend: DtqBackend, live_engine: Engine,
                                                            redis_client: redis.Redis) -> None:
    # It should: attempt numbers repeat (a DLQ retry starts again at 1), so the runner's record
    # of who runs an attempt is fenced on the stream entry too, as completions are. A runner
    # still holding attempt 1 of the earlier entry leaves the current attempt's record alone.
    result = tm.add.enqueue(1, 2)
    key = live_engine.keys.task(result.id)
    redis_client.hset(key, mapping={"status": "RUNNING", "attempt": "1", "entry_id": "2000-0", "worker_id": "w-now",
                                    "started_at": "1700000000000"})
    payload = json.loads(redis_client.hget(key, "payload"))

    def prepare_as(worker_id: str, entry_id: str) -> None:
        ctx = registry.TaskContext(task_id=result.id, attempt=1, max_attempts=1, queue="default",
                                   type="django.task", worker_id=worker_id, entry_id=entry_id)

        def run() -> None:  # in a context of its own, as the executor runs a handler
            registry.set_current(ctx)
            runner.prepare(payload)

        contextvars.copy_context().run(run)

    prepare_as("w-stale", "1000-0")
    assert redis_client.hget(key, "django_worker_ids") is None
    assert tm.add.get_result(result.id).worker_ids == ["w-now"]
    prepare_as("w-now", "2000-0")
    assert tm.add.get_result(result.id).worker_ids == ["w-now"]
    assert redis_client.hget(key, "django_worker_ids") == '["w-now"]'


def test_each_function_is_its_own_type_in_the_dlq_and_metrics(backend: DtqBackend, live_engine: Engine,
                                                              redis_client: redis.Redis,
                                                              start_worker: Callable[..., WorkerProcess]) -> None:
    # It should: two failing functions are told apart by DLQ groups, the type filter and the
    # metrics' type label (their types are their import paths, not both django.task).
    boom, bad_add = tm.boom.enqueue("no"), tm.add.enqueue("a", 1)
    ok = tm.aadd.enqueue(1, 2)
    burst(start_worker)
    groups = {g["type"]: g["count"] for g in live_engine.dlq.groups()["groups"]}
    assert groups == {"tests.django_tasks.tasks_module.boom": 1, "tests.django_tasks.tasks_module.add": 1}
    [only] = live_engine.dlq.list(type="tests.django_tasks.tasks_module.boom").items
    assert only["task_id"] == boom.id
    metrics = Client().get("/metrics").content.decode()
    for path, outcome in (("boom", "dead_lettered"), ("add", "dead_lettered"), ("aadd", "succeeded")):
        assert (f'dtq_tasks_total{{outcome="{outcome}",queue="default",type="tests.django_tasks.tasks_module.'
                f'{path}"}} 1.0') in metrics
    bad_add.refresh()
    ok.refresh()
    assert bad_add.errors[0].exception_class_path == "builtins.TypeError"
    assert ok.status == TaskResultStatus.SUCCESSFUL and ok.return_value == 3


def test_tasks_queued_as_django_task_before_per_function_types_still_run(
        backend: DtqBackend, live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should: entries already in Redis with the old generic types run, and read back as results.
    payload = {"module_path": "tests.django_tasks.tasks_module.add", "args": [2, 3], "kwargs": {},
               "takes_context": False, "priority": 0, "queue_name": "default", "run_after": None,
               "backend": "default"}
    sync = live_engine.tasks.enqueue("django.task", payload).id
    coro = live_engine.tasks.enqueue("django.atask",
                                     {**payload, "module_path": "tests.django_tasks.tasks_module.aadd"}).id
    burst(start_worker)
    assert tm.add.get_result(sync).return_value == 5 and tm.aadd.get_result(coro).return_value == 5
    assert live_engine.tasks.get(sync)["type"] == "django.task" and "handler" not in live_engine.tasks.get(sync)
