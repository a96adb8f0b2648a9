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


class UnknownTaskType(ValidationError):
    """No worker serves this task type (see Engine.check_type): refused at submit, so junk types
    cannot fill the capped DLQ and evict real dead letters."""

    code = "UNKNOWN_TASK_TYPE"
    http_status = 400


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


class RedisTrouble(DtqError):
    """Redis cannot serve the request; built from redis-py's exception by dtq_core.redis_errors.

    message is what a request's caller reads (the API envelope), state the same trouble told as
    a condition (/ready, the console), cause redis-py's or Redis's own words (the CLI line),
    kind one of redis_errors.KINDS. Transient for the caller: 503, retry later.
    """

    http_status = 503

    def __init__(self, message: str, *, kind: str = "unreachable", state: str | None = None, cause: str = "",
                 **details: Any) -> None:
        super().__init__(message, **details)
        self.kind = kind
        self.state = state if state is not None else message
        self.cause = cause


class RedisUnavailable(RedisTrouble):
    """Redis does not answer, is still loading its dataset, or has no database the URL names."""

    code = "REDIS_UNAVAILABLE"


class RedisWriteRefused(RedisTrouble):
    """Redis answers but refuses writes: a full or failing disk (MISCONF) or maxmemory (OOM)."""

    code = "REDIS_WRITE_FAILED"


class WorkerNameTaken(DtqError):
    code = "WORKER_NAME_TAKEN"


def error_body(exc: DtqError, request_id: str, *, state: bool = False) -> dict[str, Any]:
    """The contract's envelope for a dtq error, Redis trouble included: the API's responses, batch
    items and the console's JSON. state=True words Redis trouble as a condition (/ready, the
    console's state) rather than as a failed request."""
    message = exc.state if state and isinstance(exc, RedisTrouble) else exc.message
    field = exc.field if isinstance(exc, ValidationError) else None  # the one field it names
    body: dict[str, Any] = {"code": exc.code, "message": message, "request_id": request_id}
    if field:
        body["field"] = field
    return {"error": body}
