"""The dtq exception tree. Each error carries the API code and HTTP status it maps to."""

from __future__ import annotations

from typing import Any


class DtqError(Exception):
    """Base for dtq errors. Do not raise directly."""

    code = "DTQ_ERROR"
    http_status = 500

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class ValidationError(DtqError):
    code = "VALIDATION_ERROR"
    http_status = 400

    def __init__(self, message: str, *, field: str | None = None, **details: Any) -> None:
        super().__init__(message, **details)
        self.field = field


class PayloadTooLarge(ValidationError):
    code = "PAYLOAD_TOO_LARGE"
    http_status = 413


class QueueFull(DtqError):
    code = "QUEUE_FULL"
    http_status = 429


class QueueLimitReached(DtqError):
    """A submit would create a queue past DTQ_MAX_QUEUES (existing queues still take tasks)."""

    code = "QUEUE_LIMIT_REACHED"
    http_status = 409


class QueueNotEmpty(DtqError):
    code = "QUEUE_NOT_EMPTY"
    http_status = 409


class TaskNotFound(DtqError, LookupError):
    code = "TASK_NOT_FOUND"
    http_status = 404


class DeadLetterNotFound(DtqError, LookupError):
    code = "DLQ_ENTRY_NOT_FOUND"
    http_status = 404


class QueueNotFound(DtqError, LookupError):
    code = "QUEUE_NOT_FOUND"
    http_status = 404


class CancelRequested(DtqError):
    code = "CANCEL_REQUESTED"
    http_status = 409


class TaskTerminal(DtqError):
    code = "TASK_TERMINAL"
    http_status = 409


class RedisUnavailable(DtqError):
    code = "REDIS_UNAVAILABLE"
    http_status = 503


class WorkerNameTaken(DtqError):
    code = "WORKER_NAME_TAKEN"
