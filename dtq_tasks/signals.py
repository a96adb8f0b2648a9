"""dtq's task lifecycle signals (dtq_core/signals.py has what each sends)."""

from dtq_core.signals import task_dead_lettered, task_failed, task_queued, task_started, task_succeeded

__all__ = ["task_dead_lettered", "task_failed", "task_queued", "task_started", "task_succeeded"]
