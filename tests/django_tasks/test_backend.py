"""DtqBackend on the enqueue side, against a real Redis: what reaches Redis, and what does not."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis

from dtq_core.django_tasks import DtqBackend
from dtq_core.django_tasks.compat import (
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.keys import tag_of

from . import tasks_module as tm
from .conftest import BACKEND, task_keys


def test_enqueue_returns_a_ready_result_and_queues_a_django_task(backend: DtqBackend, live_engine: Engine) -> None:
    sent: list[Any] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append((sender, task_result))

    task_enqueued.connect(receiver)
    try:
        result = tm.add.enqueue(2, b=3)
    finally:
        task_enqueued.disconnect(receiver)
    assert result.status == TaskResultStatus.READY and result.args == [2] and result.kwargs == {"b": 3}
    assert result.enqueued_at is not None and result.backend == "default" and result.worker_ids == []
    assert sent == [(DtqBackend, result)]
    stored = live_engine.tasks.get(result.id)
    # The function's path is the type (DLQ groups, filters and metrics tell functions apart); the
    # runner that executes it is the handler.
    assert (stored["type"], stored["handler"], stored["queue"], stored["priority"], stored["status"]) == (
        "tests.django_tasks.tasks_module.add", "django.task", "default", "normal", "QUEUED")
    assert stored["payload"]["module_path"] == "tests.django_tasks.tasks_module.add"
    assert (stored["payload"]["args"], stored["payload"]["kwargs"]) == ([2], {"b": 3})


def test_a_django_tasks_record_keeps_its_id_for_the_version_before(backend: DtqBackend, live_engine: Engine,
                                                                     redis_client: redis.Redis) -> None:
    # Records leave out fields at their default (issue 20), the id among them; a Django task's keeps
    # it, as the previous version's result reader (a process not yet upgraded) reads it by name.
    result = tm.add.enqueue(1, 1)
    assert redis_client.hget(live_engine.keys.task(result.id), "id") == result.id
    plain = live_engine.tasks.enqueue("dtq.echo", {}, record=False)
    assert not redis_client.hexists(live_engine.keys.task(plain.id), "id")


def test_coroutine_functions_become_django_atask(backend: DtqBackend, live_engine: Engine) -> None:
    result = tm.aadd.enqueue(1, 2)
    stored = live_engine.tasks.get(result.id)
    assert (stored["type"], stored["handler"]) == ("tests.django_tasks.tasks_module.aadd", "django.atask")


def test_get_result_rebuilds_a_queued_task(backend: DtqBackend) -> None:
    result = tm.add.using(queue_name="emails", priority=7).enqueue(1, 2)
    again = tm.add.get_result(result.id)
    assert again.status == TaskResultStatus.READY and again.id == result.id
    assert (again.args, again.kwargs) == ([1, 2], {})
    assert (again.task.func, again.task.queue_name, again.task.priority) == (tm.add.func, "emails", 7)
    assert again.enqueued_at is not None and again.started_at is None and again.errors == []
    with pytest.raises(ValueError, match="not finished"):
        again.return_value  # noqa: B018


@pytest.mark.parametrize(("priority", "band"), [(100, "high"), (1, "high"), (0, "normal"), (-1, "low"),
                                                 (-100, "low")])
def test_priorities_map_onto_dtq_bands(backend: DtqBackend, live_engine: Engine, priority: int, band: str) -> None:
    result = tm.add.using(priority=priority).enqueue(1, 1)
    assert live_engine.tasks.get(result.id)["priority"] == band


@pytest.mark.parametrize(("priority", "band"), [(50, "high"), (49, "normal"), (-49, "normal"), (-50, "low")])
def test_priority_bands_are_configurable(tasks_settings: Any, live_engine: Engine, priority: int, band: str) -> None:
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"HIGH_PRIORITY_MIN": 50,
                                                                        "LOW_PRIORITY_MAX": -50}}}
    result = tm.add.using(priority=priority).enqueue(1, 1)
    assert live_engine.tasks.get(result.id)["priority"] == band


def test_run_after_becomes_a_delayed_task(backend: DtqBackend, live_engine: Engine,
                                          redis_client: redis.Redis) -> None:
    when = datetime.now(tz=UTC) + timedelta(minutes=10)
    result = tm.add.using(run_after=when).enqueue(1, 1)
    stored = live_engine.tasks.get(result.id)
    assert stored["status"] == "PENDING"
    due = redis_client.zscore(live_engine.keys.schedule(tag_of(result.id)), result.id)
    assert abs(due / 1000 - when.timestamp()) < 1
    again = tm.add.get_result(result.id)
    assert again.status == TaskResultStatus.READY and again.task.run_after == when


def test_run_after_in_the_past_runs_at_once(backend: DtqBackend, live_engine: Engine) -> None:
    result = tm.add.using(run_after=datetime.now(tz=UTC) - timedelta(hours=1)).enqueue(1, 1)
    assert live_engine.tasks.get(result.id)["status"] == "QUEUED"


def test_max_attempts_and_timeout_options_reach_the_task(tasks_settings: Any, live_engine: Engine) -> None:
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"MAX_ATTEMPTS": 3, "TIMEOUT_SECONDS": 9}}}
    stored = live_engine.tasks.get(tm.add.enqueue(1, 1).id)
    assert (stored["max_attempts"], stored["timeout_s"]) == (3, 9)


# -- malformed and oversized input ----------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: tm.add.using(queue_name="unknown"), "not valid for backend"),
        (lambda: tm.add.using(priority=101), "priority"),
        (lambda: tm.add.using(run_after=datetime(2030, 1, 1)), "aware"),  # noqa: DTZ001 - naive on purpose
        # dtq's limit, named as the Django author wrote it (not the delay_seconds it becomes)
        (lambda: tm.add.using(run_after=datetime.now(tz=UTC) + timedelta(days=400)), "run_after must be at most 366"),
    ],
)
def test_django_refuses_bad_task_options(backend: DtqBackend, make: Any, message: str) -> None:
    with pytest.raises(InvalidTask, match=message):
        make().enqueue(1, 1)


def test_a_queue_name_dtq_cannot_use_is_refused(tasks_settings: Any) -> None:
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "Bad Queue", "dlq"]}}
    for name in ("Bad Queue", "dlq"):
        with pytest.raises(InvalidTask, match="not a dtq queue name"):
            tm.add.using(queue_name=name)


@pytest.mark.parametrize("args", [(object(),), ({"when": datetime.now(tz=UTC)},), (float("nan"),)])
def test_arguments_without_a_json_form_are_refused(backend: DtqBackend, live_engine: Engine,
                                                   redis_client: redis.Redis, args: Any) -> None:
    with pytest.raises(InvalidTask, match="JSON"):
        tm.add.enqueue(*args)
    assert not task_keys(redis_client, live_engine)


def test_oversized_arguments_are_refused_and_nothing_is_queued(tasks_settings: Any, live_engine: Engine,
                                                               redis_client: redis.Redis) -> None:
    tasks_settings.DTQ = {**tasks_settings.DTQ, "PAYLOAD_MAX_BYTES": 1024}
    with pytest.raises(InvalidTask, match="PAYLOAD_MAX_BYTES"):
        tm.add.enqueue("x" * 2000, 1)
    assert not task_keys(redis_client, live_engine)


@pytest.mark.parametrize("bad_id", ["", "nope", "a:b", "x" * 500, "0" * 32, "abc123-" + "0" * 32])
def test_unknown_ids_raise_task_result_does_not_exist(backend: DtqBackend, bad_id: str) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(bad_id)


def test_a_plain_dtq_task_is_not_a_django_result(backend: DtqBackend, live_engine: Engine) -> None:
    task_id = live_engine.tasks.enqueue("dtq.echo", {"a": 1}).id
    with pytest.raises(TaskResultDoesNotExist):
        backend.get_result(task_id)


def test_a_misconfigured_backend_refuses_to_enqueue(tasks_settings: Any) -> None:
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"REDIS_URL": "http://nope"}}}
    with pytest.raises(InvalidTaskBackend, match="REDIS_URL"):
        tm.add.enqueue(1, 1)


def test_cancelling_a_queued_task_fails_it_with_the_reason(backend: DtqBackend, live_engine: Engine) -> None:
    result = tm.add.enqueue(1, 1)
    live_engine.tasks.cancel(result.id, Actor.cli())
    result.refresh()
    assert result.status == TaskResultStatus.FAILED and result.finished_at is not None
    assert result.errors[-1].exception_class_path == "dtq_core.django_tasks.results.TaskCancelled"
    assert result.errors[-1].exception_class.__name__ == "TaskCancelled"
    with pytest.raises(ValueError, match="failed"):
        result.return_value  # noqa: B018


# -- Redis down -----------------------------------------------------------------------------------
def test_redis_down_fails_enqueue_and_get_result_fast(tasks_settings: Any) -> None:
    tasks_settings.DTQ = {**tasks_settings.DTQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    started = datetime.now(tz=UTC)
    with pytest.raises(redis.ConnectionError):
        tm.add.enqueue(1, 1)
    with pytest.raises(redis.ConnectionError):
        tm.add.get_result("abc123-" + "0" * 32)  # an id of no task, but one dtq could have made
    assert datetime.now(tz=UTC) - started < timedelta(seconds=4)


def test_a_frozen_redis_fails_enqueue_within_two_seconds(tasks_settings: Any, tmp_path: Any) -> None:
    from ..redis_server import RedisServer

    with RedisServer(tmp_path / "frozen", appendonly=False) as server:
        tasks_settings.DTQ = {**tasks_settings.DTQ, "REDIS_URL": server.url}
        server.pause()
        try:
            started = datetime.now(tz=UTC)
            with pytest.raises((redis.TimeoutError, redis.ConnectionError)):
                tm.add.enqueue(1, 1)
            assert datetime.now(tz=UTC) - started < timedelta(seconds=2.5)
        finally:
            server.resume()


def test_results_and_payloads_are_plain_json(backend: DtqBackend, live_engine: Engine) -> None:
    result = tm.add.enqueue((1, 2), b=b"bytes")
    payload = live_engine.tasks.get(result.id)["payload"]
    assert payload["args"] == [[1, 2]] and payload["kwargs"] == {"b": "bytes"}
    assert json.loads(json.dumps(payload)) == payload


def test_aenqueue_and_aget_result(backend: DtqBackend, live_engine: Engine) -> None:
    from asgiref.sync import async_to_sync

    async def roundtrip() -> tuple[Any, Any]:
        result = await tm.aadd.aenqueue(1, 2)
        return result, await tm.aadd.aget_result(result.id)

    result, again = async_to_sync(roundtrip)()
    assert result.status == again.status == TaskResultStatus.READY and again.args == [1, 2]
    assert live_engine.tasks.get(result.id)["handler"] == "django.atask"


def test_naive_run_after_works_when_use_tz_is_off(tasks_settings: Any, live_engine: Engine,
                                                  redis_client: redis.Redis) -> None:
    tasks_settings.USE_TZ = False
    when = datetime.now() + timedelta(minutes=5)  # noqa: DTZ005 - naive local time, as USE_TZ=False apps use
    result = tm.add.using(run_after=when).enqueue(1, 1)
    assert live_engine.tasks.get(result.id)["status"] == "PENDING"
    due = redis_client.zscore(live_engine.keys.schedule(tag_of(result.id)), result.id) / 1000
    assert abs(due - when.timestamp()) < 2
