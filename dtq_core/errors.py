"""The dtq exception tree. Each error carries the API code and HTTP status it maps to."""

from __future__ import annotations

from enum import IntEnum
from typing import Any, NoReturn


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


class TaskRefused(DtqError):
    """An enqueue middleware refused the task (dtq_core/middleware.py): nothing was enqueued.
    Raise it from `before_enqueue` with a message the caller can act on."""

    code = "TASK_REFUSED"
    http_status = 400

    def __init__(self, message: str, **details: Any) -> None:
        super().__init__(message, **details)


class UnknownTaskType(ValidationError):
    """No worker serves this task type (see Tasks.check_type): refused at submit, so junk types
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


class WorkflowQueueLimitReached(QueueLimitReached, ValidationError):
    """QUEUE_LIMIT_REACHED (409) for a workflow whose new queues do not all fit DTQ_MAX_QUEUES,
    naming in `field` the step whose queue is the first past the bound, as the tree's other
    refusals name theirs (error_body writes `field` for a ValidationError)."""


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


class WorkerNotFound(DtqError, LookupError):
    """No live worker of that id (its record expired, or it never ran)."""

    code = "WORKER_NOT_FOUND"
    http_status = 404


class PeriodicNotFound(DtqError, LookupError):
    code = "PERIODIC_NOT_FOUND"
    http_status = 404


class PeriodicExists(DtqError):
    code = "PERIODIC_EXISTS"
    http_status = 409


class PeriodicConflict(DtqError):
    """A schedule kept changing between a change's read and its write (every attempt of
    engine/periodic.py's): nothing of the change was written. The caller retries."""

    code = "PERIODIC_CONFLICT"
    http_status = 409


class PeriodicDeclaredInCode(DtqError):
    """A schedule declared in code (@dtq_tasks.periodic, DTQ_PERIODIC) changes with a deploy:
    editing or deleting it at run time would be undone by the next worker start."""

    code = "PERIODIC_DECLARED_IN_CODE"
    http_status = 409


class CancelRequested(DtqError):
    code = "CANCEL_REQUESTED"
    http_status = 409


class TaskTerminal(DtqError):
    code = "TASK_TERMINAL"
    http_status = 409


class TaskNotScheduled(DtqError):
    """Run now asked of a task that is not waiting in the schedule (it is queued or running)."""

    code = "TASK_NOT_SCHEDULED"
    http_status = 409


class TaskRunning(DtqError):
    """Delete asked of a task that runs: cancel it, and delete it once it has ended."""

    code = "TASK_RUNNING"
    http_status = 409


class WorkflowNotFound(DtqError, LookupError):
    code = "WORKFLOW_NOT_FOUND"
    http_status = 404


class WorkflowTerminal(DtqError):
    """The workflow is SUCCEEDED, FAILED or CANCELLED already (a cancel has nothing to stop)."""

    code = "WORKFLOW_FINISHED"
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


class ReplicationTimeout(RedisTrouble):
    """Fewer replicas than DTQ_REDIS_MIN_REPLICAS confirmed a write within DTQ_REDIS_WAIT_TIMEOUT_MS
    (WAIT). Unlike a refusal, the write was made on the master: it may or may not survive a failover."""

    code = "REDIS_REPLICATION_TIMEOUT"


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


class LeaseLost(DtqError):
    """A leader script found the scheduler lock held by another worker (or by nobody)."""

    code = "LEASE_LOST"


class PartitionClosed(DtqError):
    """A script refused a partition whose owner key does not name the caller's layout (the queue
    was deleted, or deleted and created again, since the caller read the registry). Internal:
    the caller reads the registry again and retries; clients never see it."""

    code = "PARTITION_CLOSED"


class ErrorCode(IntEnum):
    """The return codes of the Lua scripts, named alike at the top of scripts/includes/common.lua
    (`local CODE = {...}`). Scripts return a code first ({code, ...}) or alone; a negative code is
    a refusal that changed nothing, and raise_for_code turns it into its DtqError."""

    OK = 0  # the script did what was asked
    EXISTING = 1  # enqueueTask: the idempotency key names a task already submitted; nothing written
    CANCEL_SIGNALLED = 2  # cancelTask: the task runs; its worker is told to stop
    TASK_NOT_FOUND = -1
    TASK_TERMINAL = -2
    CANCEL_REQUESTED = -3  # cancelTask: the task runs and was already told to stop
    QUEUE_NOT_FOUND = -4
    QUEUE_NOT_EMPTY = -5
    QUEUE_FULL = -6
    QUEUE_LIMIT_REACHED = -7
    LEASE_LOST = -8  # leader scripts: this worker no longer holds the scheduler lock
    PARTITION_CLOSED = -9  # the partition's owner key does not name the caller's layout
    PERIODIC_NOT_FOUND = -10  # savePeriodic/dropPeriodic/firePeriodic: no such schedule here
    PERIODIC_EXISTS = -11  # savePeriodic create: the schedule exists already


def raise_for_code(code: int, *, task_id: str | None, script: str, **details: Any) -> ErrorCode:
    """Return the code of a script's reply as an ErrorCode, or raise the DtqError a negative one
    stands for (BullMQ's finishedErrors). `details` carries what the message names: queue,
    status (TASK_TERMINAL), count and max_depth / max_queues (QUEUE_FULL / QUEUE_LIMIT_REACHED:
    the depth or number of queues the script found), waiting / in_flight / scheduled / dead
    (QUEUE_NOT_EMPTY)."""
    code = ErrorCode(int(code))
    if code >= 0:
        return code
    queue = details.get("queue")
    ids = {"task_id": task_id} if task_id is not None else {}
    if code is ErrorCode.TASK_NOT_FOUND:
        raise TaskNotFound(f"task {task_id!r} not found", **ids)
    if code is ErrorCode.TASK_TERMINAL:
        raise TaskTerminal(f"task {task_id} is already {details['status']}", **ids, status=details["status"])
    if code is ErrorCode.CANCEL_REQUESTED:
        raise CancelRequested(f"task {task_id} is running; its cancellation is in flight", **ids)
    if code is ErrorCode.QUEUE_NOT_FOUND:
        raise QueueNotFound(f"queue {queue!r} not found", queue=queue)
    if code is ErrorCode.QUEUE_NOT_EMPTY:
        waiting, in_flight, scheduled = details["waiting"], details["in_flight"], details["scheduled"]
        dead = details.get("dead", 0)
        raise QueueNotEmpty(
            f"queue {queue!r} is not empty: {waiting} waiting, {in_flight} in flight, {scheduled} scheduled"
            + (f", {dead} dead-lettered" if dead else "")
            + "; purge or cancel them (or let them finish)" + (", retry or discard its dead letters" if dead else "")
            + " first",
            queue=queue, waiting=waiting, in_flight=in_flight, scheduled=scheduled, dead=dead)
    if code is ErrorCode.QUEUE_FULL:
        depth = int(details["count"])
        raise QueueFull(f"queue {queue!r} holds {depth} tasks, the limit is {details['max_depth']} "
                        "(DTQ_MAX_QUEUE_DEPTH)", queue=queue, depth=depth)
    if code is ErrorCode.QUEUE_LIMIT_REACHED:
        queues, limit = int(details["count"]), details["max_queues"]
        raise QueueLimitReached(
            f"queue {queue!r} does not exist and {queues} queues do, the limit is "
            f"{limit} (DTQ_MAX_QUEUES): submit to an existing queue, or delete unused ones",
            queue=queue, queues=queues, limit=limit)
    if code is ErrorCode.PERIODIC_NOT_FOUND:
        raise PeriodicNotFound(f"periodic schedule {details.get('name')!r} not found", name=details.get("name"))
    if code is ErrorCode.PERIODIC_EXISTS:
        raise PeriodicExists(f"periodic schedule {details.get('name')!r} exists already", name=details.get("name"))
    if code is ErrorCode.PARTITION_CLOSED:
        raise PartitionClosed(f"{script}: the partition of queue {queue!r} is closed (deleted or re-created)",
                              queue=queue)
    _raise_lease_lost(script)


def _raise_lease_lost(script: str) -> NoReturn:
    raise LeaseLost(f"{script}: the scheduler lock is no longer this worker's", script=script)
