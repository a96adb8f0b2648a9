"""Pure mapping between dtq task records and Django's TaskResult (shared by backend and runner).

Status mapping (docs/django-tasks.md): PENDING, QUEUED, RETRYING -> READY; RUNNING -> RUNNING;
SUCCEEDED -> SUCCESSFUL; FAILED, DEAD_LETTERED, CANCELLED, EXPIRED -> FAILED, with the reason in
the last TaskError.
"""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.utils.module_loading import import_string

from ..encryption import reveal
from .compat import InvalidTask, Task, TaskError, TaskResult, TaskResultStatus

SYNC_TYPE = "django.task"  # the runner's handler of sync functions (the worker's thread pool)
ASYNC_TYPE = "django.atask"  # and of coroutine functions (the worker's event loop)

TASK_TYPES = frozenset({SYNC_TYPE, ASYNC_TYPE})  # the runner's handlers (and the types of older tasks)


def is_django_task(fields: Mapping[str, str]) -> bool:
    """Whether a task hash is a Django task: run by the Django runner, under the function's path
    as its type (`handler` names the runner) or, queued before that, as `django.task`/`atask`."""
    return fields.get("handler") in TASK_TYPES or fields.get("type") in TASK_TYPES

STATUS_MAP: Mapping[str, TaskResultStatus] = {
    "PENDING": TaskResultStatus.READY,
    "QUEUED": TaskResultStatus.READY,
    "RETRYING": TaskResultStatus.READY,
    "RUNNING": TaskResultStatus.RUNNING,
    "SUCCEEDED": TaskResultStatus.SUCCESSFUL,
    "FAILED": TaskResultStatus.FAILED,
    "DEAD_LETTERED": TaskResultStatus.FAILED,
    "CANCELLED": TaskResultStatus.FAILED,
    "EXPIRED": TaskResultStatus.FAILED,
}

# The executor names its own errors "dtq.<Class>"; Django wants an importable class path.
_DTQ_ERROR_PATHS = {
    "dtq.UnknownTaskType": "dtq_core.executor.UnknownTaskType",
    "dtq.PayloadDecodeError": "dtq_core.executor.PayloadDecodeError",
    "dtq.HandlerTimeout": "dtq_core.executor.HandlerTimeout",
    "dtq.WorkerLost": f"{__name__}.WorkerLost",
}


class TaskEndedEarly(Exception):
    """Base of the reasons a Django task failed without an exception of its own."""


class TaskCancelled(TaskEndedEarly):
    """The task was cancelled (API, console or CLI) before it finished."""


class TaskExpired(TaskEndedEarly):
    """The task's ttl passed before a worker started it."""


class TaskFailed(TaskEndedEarly):
    """The task failed and dtq recorded no exception for it."""


class WorkerLost(TaskEndedEarly):
    """The worker running the attempt went silent (crashed, killed or cut off) past the visibility timeout."""


_REASONS: Mapping[str, type[TaskEndedEarly]] = {"CANCELLED": TaskCancelled, "EXPIRED": TaskExpired}


class MalformedPayload(ValueError):
    """A django.task payload lacks module_path, args or kwargs of the right types."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Call:
    """What a django.task payload asks a worker to run."""

    module_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    takes_context: bool
    overrides: dict[str, Any]

    @classmethod
    def from_payload(cls, payload: Any) -> Call:
        if not isinstance(payload, dict) or not isinstance(payload.get("module_path"), str):
            raise MalformedPayload("payload must be an object with a string module_path")
        args, kwargs = payload.get("args", []), payload.get("kwargs", {})
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            raise MalformedPayload("payload args must be a list and kwargs an object")
        overrides = {k: payload[k] for k in ("priority", "queue_name", "backend") if payload.get(k) is not None}
        if payload.get("run_after"):
            overrides["run_after"] = datetime.fromisoformat(payload["run_after"])
        return cls(module_path=payload["module_path"], args=args, kwargs=kwargs,
                   takes_context=bool(payload.get("takes_context")), overrides=overrides)


def dtq_priority(priority: int, *, high_min: int, low_max: int) -> str:
    """Map Django's -100..100 priority onto dtq's bands (defaults: >0 high, 0 normal, <0 low)."""
    if priority >= high_min:
        return "high"
    if priority <= low_max:
        return "low"
    return "normal"


def resolve_task(call: Call) -> Task[Any, Any]:
    """Import the Task at module_path and apply the per-enqueue overrides it was sent with."""
    found = import_string(call.module_path)
    if not isinstance(found, Task):
        raise InvalidTask(f"{call.module_path} is not a Django task (decorate it with @task)")
    if all(getattr(found, name) == value for name, value in call.overrides.items()):
        return found
    # Task.using() would validate again against this process's TASKS; the enqueuing process
    # already did, and a worker need not list every queue a web process may use.
    clone = copy.copy(found)
    for name, value in call.overrides.items():
        object.__setattr__(clone, name, value)
    return clone


def error_path(error_class: str) -> str:
    """Turn the executor's error class name into an importable exception class path."""
    if error_class in _DTQ_ERROR_PATHS:
        return _DTQ_ERROR_PATHS[error_class]
    if error_class.startswith("dtq."):  # a dtq reason this module does not know yet: still importable
        return f"{__name__}.TaskFailed"
    return _importable(error_class) if "." in error_class else f"builtins.{error_class}"


def _importable(path: str) -> str:
    """path, or the path of the nearest class in its MRO that import_string can reach when it
    cannot reach the class itself: one nested in a class (`client.Client.Error`: import_string
    takes `client.Client` for a module) or one defined in a function (`<locals>`, found by no
    import: builtins.BaseException, all that is known of it). Only modules this process has
    imported already are looked in: the path comes from Redis, and reading a result must not
    import (and run) a module a stored error names. One not imported here is kept as it is."""
    parts = path.split(".")
    for i in range(len(parts) - 1, 0, -1):  # the longest prefix that is a loaded module
        found: Any = sys.modules.get(".".join(parts[:i]))
        if found is None:
            continue
        for name in parts[i:]:
            found = getattr(found, name, None)
        if isinstance(found, type) and i == len(parts) - 1:
            return path  # importable as it is (dtq_tasks.RetryableError too, defined elsewhere)
        if isinstance(found, type):
            return next((f"{c.__module__}.{c.__qualname__}" for c in found.__mro__ if _reachable(c)), path)
        break
    return "builtins.BaseException" if "<locals>" in parts else path


def _reachable(cls: type) -> bool:
    """Whether import_string finds cls at `module.qualname`."""
    module = sys.modules.get(cls.__module__)
    return "." not in cls.__qualname__ and getattr(module, cls.__qualname__, None) is cls


def task_errors(raw: str | None) -> list[TaskError]:
    """Parse the hash's errors JSON (attempt, error, message, traceback, at) into TaskErrors."""
    try:
        entries = json.loads(raw) if raw else []
    except ValueError:
        entries = []
    out = []
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict):
            continue
        name = str(entry.get("error") or "Exception")
        tb = str(entry.get("traceback") or f"{name}: {entry.get('message', '')}")
        out.append(TaskError(exception_class_path=error_path(name), traceback=tb))
    return out


def from_ms(raw: str | None) -> datetime | None:
    if raw in (None, ""):
        return None
    return datetime.fromtimestamp(int(raw) / 1000, tz=UTC)


def worker_ids(fields: Mapping[str, str]) -> list[str]:
    raw = fields.get("django_worker_ids")
    if raw:
        try:
            ids = json.loads(raw)
            if isinstance(ids, list):
                return [str(i) for i in ids]
        except ValueError:
            pass
    # Not recorded (the runner records at the start of each attempt): the last worker, if any.
    return [fields["worker_id"]] if fields.get("worker_id") else []


def to_result(fields: Mapping[str, str], result_json: str | None, *, alias: str,
              task_id: str | None = None) -> TaskResult[Any]:
    """Rebuild the TaskResult of a django.task hash (and its stored result, when present);
    task_id: the id it was read by (a record written since issue 20's lean record has no id field)."""
    # Encrypted (DTQ_ENCRYPT_TYPES): read with this process's keys; without one, the call cannot be
    # rebuilt and MalformedPayload says the payload is not one (a Django task's result needs a key).
    call = Call.from_payload(reveal(json.loads(fields.get("payload") or "{}"))[0])
    task = resolve_task(call)
    dtq_status = fields.get("status", "")
    errors = task_errors(fields.get("errors"))
    if dtq_status in _REASONS:
        reason = _REASONS[dtq_status]
        errors.append(TaskError(exception_class_path=f"{reason.__module__}.{reason.__qualname__}",
                                traceback=f"dtq: the task ended {dtq_status}: {reason.__doc__}"))
    elif dtq_status in ("FAILED", "DEAD_LETTERED") and not errors:
        errors.append(TaskError(exception_class_path=f"{TaskFailed.__module__}.{TaskFailed.__qualname__}",
                                traceback=f"dtq: the task ended {dtq_status}: {fields.get('last_error') or ''}"))
    result: TaskResult[Any] = TaskResult(
        task=task,
        id=fields.get("id") or task_id or "",
        status=STATUS_MAP.get(dtq_status, TaskResultStatus.READY),
        enqueued_at=from_ms(fields.get("created_at")),
        started_at=from_ms(fields.get("django_started_at") or fields.get("started_at")),
        finished_at=from_ms(fields.get("finished_at")),
        last_attempted_at=from_ms(fields.get("started_at")),
        args=call.args,
        kwargs=call.kwargs,
        backend=call.overrides.get("backend", alias),
        errors=errors,
        worker_ids=worker_ids(fields),
    )
    if dtq_status == "SUCCEEDED" and result_json is not None:
        # A result over DTQ_RESULT_MAX_BYTES is stored as a JSON string of its head (result_truncated).
        object.__setattr__(result, "_return_value", reveal(json.loads(result_json))[0])
    return result
