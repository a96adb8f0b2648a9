"""Django signals for a task's life (docs/tasks.md, "Signals"). Connect receivers as usual:

    from dtq_tasks.signals import task_failed

    @receiver(task_failed)
    def page_someone(sender, task_id, type, queue, attempt, exception, will_retry, **kwargs): ...

- task_queued(task_id, type, queue, headers): in the process that enqueued it, once it is queued
  (not for an idempotent or unique submit answered with an existing task).
- task_started(task_id, type, queue, attempt, context): in the worker, before the handler runs
  (in its thread for a sync handler; on the worker's event loop for an async one).
- task_succeeded(task_id, type, queue, attempt, result, duration_s): after the handler returned.
- task_failed(task_id, type, queue, attempt, exception, will_retry): after an attempt raised;
  will_retry is False when this was its last attempt or the error is permanent.
- task_dead_lettered(task_id, type, queue, attempt, error_class, error_message): once the
  completion moved it to the DLQ (on the worker's event loop).

Receivers run in the process and thread that sends, synchronously: keep them quick. One that
raises is logged and never fails the task. With no receiver connected, nothing is sent and the
worker pays one check per attempt.
"""

from __future__ import annotations

import sys

from django.dispatch import Signal

from . import hooks

task_queued = Signal()
task_started = Signal()
task_succeeded = Signal()
task_failed = Signal()
task_dead_lettered = Signal()

hooks.SIGNALS = sys.modules[__name__]
