"""Django's Tasks framework from `django.tasks` (Django >= 6.0) or the `django_tasks` backport.

Both spellings of the exception names are exported under Django 6's names, so the rest of dtq
never cares which one is installed: the backport says `InvalidTaskError`, `InvalidTaskBackendError`
and (before 0.7) `ResultDoesNotExist`; Django 6 says `InvalidTask`, `InvalidTaskBackend` and
`TaskResultDoesNotExist`.
"""

from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Typed as the backport, which the locks install (Django 5.2): two modules cannot both be the
    # type of one name, and mypy cannot tell which import below succeeds.
    from django_tasks import default_task_backend, task, task_backends
    from django_tasks import exceptions as _exceptions
    from django_tasks import signals as _signals
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus

    SOURCE = "django_tasks"
else:
    try:  # Django >= 6.0 ships the framework itself
        from django.tasks import default_task_backend, task, task_backends
        from django.tasks import exceptions as _exceptions
        from django.tasks import signals as _signals
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus

        SOURCE = "django.tasks"
    except ImportError:  # Django 5.2: the backport, which imports as django_tasks
        from django_tasks import default_task_backend, task, task_backends
        from django_tasks import exceptions as _exceptions
        from django_tasks import signals as _signals
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus

        SOURCE = "django_tasks"


try:  # bytes -> str and friends, exactly as Django does; only the JSON round trip when absent
    _django_normalize = importlib.import_module(f"{SOURCE}.utils").normalize_json
except (ImportError, AttributeError):
    def _django_normalize(value: Any) -> Any:
        return value


def _first(*names: str) -> type[Exception]:
    for name in names:
        found = getattr(_exceptions, name, None)
        if found is not None:
            return found  # type: ignore[no-any-return]
    raise ImportError(f"{SOURCE}.exceptions has none of {names}")


InvalidTask = _first("InvalidTask", "InvalidTaskError")
InvalidTaskBackend = _first("InvalidTaskBackend", "InvalidTaskBackendError")
TaskResultDoesNotExist = _first("TaskResultDoesNotExist", "ResultDoesNotExist")
# get_result of another task's id (Task.get_result checks the result belongs to that task)
TaskResultMismatch = _first("TaskResultMismatch", "TaskResultDoesNotExist")

task_enqueued = _signals.task_enqueued
task_started = _signals.task_started
task_finished = _signals.task_finished


def normalize_json(value: Any) -> Any:
    """Return `value` as the JSON it will be stored as; raise TypeError/ValueError when it has none.

    Django's own normaliser first (bytes become str, tuples lists), then a JSON round trip so
    what a worker hands back equals what get_result later reads (int dict keys become str).
    """
    try:
        return json.loads(json.dumps(_django_normalize(value), allow_nan=False))
    except RecursionError:
        raise ValueError("value is nested too deeply") from None


__all__ = [
    "SOURCE", "BaseTaskBackend", "InvalidTask", "InvalidTaskBackend", "Task", "TaskContext", "TaskError",
    "TaskResult", "TaskResultDoesNotExist", "TaskResultMismatch", "TaskResultStatus", "default_task_backend",
    "normalize_json", "task", "task_backends",
    "task_enqueued", "task_finished", "task_started",
]
