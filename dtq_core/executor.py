"""The public path of the executor's error classes, as Django Tasks results report them
(TaskResult.errors[].exception_class_path, see docs/django-tasks.md); they live in
dtq_core/worker/executor.py."""

from .worker.executor import HandlerTimeout, PayloadDecodeError, UnknownTaskType

__all__ = ["HandlerTimeout", "PayloadDecodeError", "UnknownTaskType"]
