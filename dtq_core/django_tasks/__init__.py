"""dtq's Django Tasks backend: `TASKS = {"default": {"BACKEND": "dtq_core.django_tasks.DtqBackend"}}`.

backend.py is the backend (enqueue, get_result, checks wiring); runner.py the worker-side handlers
`django.task`/`django.atask`; results.py the mapping between dtq records and TaskResult; checks.py
its system checks; compat.py `django.tasks` (Django >= 6) or the `django_tasks` backport.
"""

from .backend import DtqBackend, TaskCancelled, TaskExpired, TaskFailed, enqueue_on_commit

__all__ = ["DtqBackend", "TaskCancelled", "TaskExpired", "TaskFailed", "enqueue_on_commit"]
