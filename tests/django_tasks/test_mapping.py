"""Pure mapping between dtq task records and Django TaskResults: statuses, errors, priorities."""

from __future__ import annotations

import json
import os
import sys

import pytest

from dtq_core.django_tasks.compat import TaskResultStatus
from dtq_core.django_tasks.results import dtq_priority, error_path, task_errors, to_result

PAYLOAD = json.dumps({"module_path": "tests.django_tasks.tasks_module.add", "args": [1, 2], "kwargs": {},
                      "takes_context": False, "priority": 0, "queue_name": "default", "backend": "default"})
ERRORS = json.dumps([{"attempt": 1, "error": "ValueError", "message": "bad",
                      "traceback": "Traceback...\nValueError: bad", "at": "2026-01-01T00:00:00.000Z"}])


def fields(status: str, **extra: str) -> dict[str, str]:
    return {"id": "t1", "type": "django.task", "status": status, "payload": PAYLOAD, "created_at": "1700000000000",
            **extra}


@pytest.mark.parametrize(("dtq_status", "django_status"), [
    ("PENDING", TaskResultStatus.READY), ("QUEUED", TaskResultStatus.READY), ("RETRYING", TaskResultStatus.READY),
    ("RUNNING", TaskResultStatus.RUNNING), ("SUCCEEDED", TaskResultStatus.SUCCESSFUL),
    ("FAILED", TaskResultStatus.FAILED), ("DEAD_LETTERED", TaskResultStatus.FAILED),
    ("CANCELLED", TaskResultStatus.FAILED), ("EXPIRED", TaskResultStatus.FAILED),
])
def test_every_dtq_status_maps_to_a_django_status(dtq_status: str, django_status: TaskResultStatus) -> None:
    assert to_result(fields(dtq_status), None, alias="default").status == django_status


@pytest.mark.parametrize(("dtq_status", "reason"), [
    ("CANCELLED", "dtq_core.django_tasks.results.TaskCancelled"),
    ("EXPIRED", "dtq_core.django_tasks.results.TaskExpired"),
    ("FAILED", "dtq_core.django_tasks.results.TaskFailed"),
    ("DEAD_LETTERED", "dtq_core.django_tasks.results.TaskFailed"),
])
def test_a_failure_without_an_exception_names_its_reason_last(dtq_status: str, reason: str) -> None:
    result = to_result(fields(dtq_status, last_error="worker lost"), None, alias="default")
    assert result.errors[-1].exception_class_path == reason
    assert issubclass(result.errors[-1].exception_class, Exception)


def test_a_dead_letter_keeps_its_exception_as_the_last_error() -> None:
    result = to_result(fields("DEAD_LETTERED", errors=ERRORS), None, alias="default")
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"]
    assert result.errors[0].traceback.endswith("ValueError: bad")


def test_a_cancel_after_failed_attempts_keeps_them_and_adds_the_reason() -> None:
    result = to_result(fields("CANCELLED", errors=ERRORS), None, alias="default")
    assert [e.exception_class.__name__ for e in result.errors] == ["ValueError", "TaskCancelled"]


def test_times_worker_ids_and_the_return_value_come_from_the_record() -> None:
    record = fields("SUCCEEDED", started_at="1700000005000", django_started_at="1700000001000",
                    finished_at="1700000006000", django_worker_ids='["a","b"]', worker_id="b")
    result = to_result(record, "3", alias="default")
    assert result.return_value == 3 and result.worker_ids == ["a", "b"] and result.attempts == 2
    assert result.enqueued_at.timestamp() == 1700000000
    assert (result.started_at.timestamp(), result.last_attempted_at.timestamp()) == (1700000001, 1700000005)
    assert result.finished_at.timestamp() == 1700000006


def test_an_unrecorded_attempt_falls_back_to_the_last_worker() -> None:
    assert to_result(fields("RUNNING", worker_id="w9"), None, alias="default").worker_ids == ["w9"]
    assert to_result(fields("QUEUED"), None, alias="default").worker_ids == []


@pytest.mark.parametrize(("name", "path"), [
    ("ValueError", "builtins.ValueError"), ("dtq.HandlerTimeout", "dtq_core.executor.HandlerTimeout"),
    ("dtq.UnknownTaskType", "dtq_core.executor.UnknownTaskType"), ("dtq_tasks.RetryableError",
                                                                   "dtq_tasks.RetryableError"),
    ("myapp.errors.Oops", "myapp.errors.Oops"), ("dtq.WorkerLost", "dtq_core.django_tasks.results.WorkerLost"),
    ("dtq.SomethingNew", "dtq_core.django_tasks.results.TaskFailed"),
    # import_string cannot reach a nested class, nor one defined in a function: a class of its MRO
    ("tests.django_tasks.tasks_module.PaymentClient.Declined", "tests.django_tasks.tasks_module.PaymentError"),
    ("tests.django_tasks.tasks_module.charge.<locals>.Oops", "builtins.BaseException"),
])
def test_error_names_become_importable_class_paths(name: str, path: str) -> None:
    assert error_path(name) == path


@pytest.mark.parametrize(("priority", "band"), [(100, "high"), (34, "high"), (1, "high"), (0, "normal"),
                                                (-1, "low"), (-100, "low")])
def test_default_priority_bands(priority: int, band: str) -> None:
    assert dtq_priority(priority, high_min=1, low_max=-1) == band


@pytest.mark.parametrize(("priority", "band"), [(34, "high"), (33, "normal"), (-33, "normal"), (-34, "low")])
def test_thirds_as_configured_bands(priority: int, band: str) -> None:
    assert dtq_priority(priority, high_min=34, low_max=-34) == band


def test_reading_a_result_does_not_import_a_module_a_stored_error_names(monkeypatch: pytest.MonkeyPatch) -> None:
    # The errors come from Redis: a path there must not make the reading process import (and run)
    # a module. One this process has not imported is shown as stored.
    monkeypatch.delenv("DTQ_TEST_NEVER_IMPORTED", raising=False)
    monkeypatch.delitem(sys.modules, "tests.django_tasks.never_imported", raising=False)
    raw = json.dumps([{"attempt": 1, "error": "tests.django_tasks.never_imported.Boom", "message": "x", "at": 1}])
    [error] = task_errors(raw)
    assert "DTQ_TEST_NEVER_IMPORTED" not in os.environ
    assert error.exception_class_path == "tests.django_tasks.never_imported.Boom"
