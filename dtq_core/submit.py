"""Validation of a task submission, shared by dtq_tasks.enqueue, the API and the Django backend,
and the making of task ids."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from typing import Any

from .codec import is_unicode
from .config import DtqConfig
from .errors import PayloadTooLarge, ValidationError
from .keys import PRIORITIES
from .task import QUEUE_NAME_RE, RESERVED_QUEUES, TASK_TYPE_RE

MAX_DELAY_S = 366 * 86400
MAX_TTL_S = 366 * 86400
MAX_ATTEMPTS_LIMIT = 100
MAX_TIMEOUT_S = 7 * 86400
MAX_IDEMPOTENCY_KEY = 200
MAX_REQUEST_ID = 200

# One encoder for every submission: json.dumps with options builds a new JSONEncoder per call.
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode


@dataclass(frozen=True, kw_only=True, slots=True)
class Submission:
    """A validated submission. Its id is made once its partition is chosen (`placed`), since the
    id names the partition: engine.tasks does that just before the enqueue script runs."""

    type: str
    payload_json: str
    queue: str
    priority: str
    delay_s: float
    ttl_s: float | None
    max_attempts: int
    timeout_s: float
    idempotency_key: str | None
    request_id: str | None
    # The registered handler that runs the task when it is not the type itself: a Django task's
    # type is its function's import path, its handler dtq's Django runner (django.task/atask).
    handler: str = ""
    task_id: str = ""  # "" until placed in a partition

    def placed(self, tag: str) -> Submission:
        """This submission in partition `tag`, under a new id that names it."""
        # Spelled out: dataclasses.replace inspects the fields on every call, a tenth of the
        # client's work per enqueue.
        return Submission(type=self.type, payload_json=self.payload_json, queue=self.queue,
                          priority=self.priority, delay_s=self.delay_s, ttl_s=self.ttl_s,
                          max_attempts=self.max_attempts, timeout_s=self.timeout_s,
                          idempotency_key=self.idempotency_key, request_id=self.request_id,
                          handler=self.handler, task_id=new_task_id(tag))

    @property
    def handler_name(self) -> str:
        """The name a worker must have registered to run this task."""
        return self.handler or self.type


def new_task_id(tag: str) -> str:
    """A task id: its partition's tag, a dash, 32 hex digits (dtq_core.keys.TASK_ID_RE), so a
    lookup by id finds the partition's slot. At most 49 characters: ids stay under 64."""
    return f"{tag}-{os.urandom(16).hex()}"  # 128 random bits, as uuid4's 122, without its object


def _number(name: str, value: Any, *, minimum: float, maximum: float, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValidationError(f"{name} must be a number", field=name)
    if integer and not float(value).is_integer():
        raise ValidationError(f"{name} must be a whole number", field=name)
    if not minimum <= value <= maximum:
        raise ValidationError(f"{name} must be between {minimum:g} and {maximum:g}", field=name)
    return value


def validate(
    config: DtqConfig,
    type: Any,
    payload: Any = None,
    *,
    queue: Any = "default",
    priority: Any = "normal",
    delay_seconds: Any = 0,
    ttl_seconds: Any = None,
    max_attempts: Any = None,
    timeout_seconds: Any = None,
    idempotency_key: Any = None,
    request_id: Any = None,
    handler: str | None = None,
) -> Submission:
    """Check every field of a submission; raise ValidationError / PayloadTooLarge naming it."""
    if not isinstance(type, str) or not TASK_TYPE_RE.fullmatch(type):
        raise ValidationError(
            "type must be 1-200 characters of letters, digits and _ . : - (e.g. 'dtq.echo')", field="type"
        )
    if handler is not None and (not isinstance(handler, str) or not TASK_TYPE_RE.fullmatch(handler)):
        raise ValidationError("handler must be a registered task type name", field="handler")
    if not isinstance(queue, str) or not QUEUE_NAME_RE.fullmatch(queue):
        raise ValidationError("queue must match [a-z0-9][a-z0-9_-]{0,63}", field="queue")
    if queue in RESERVED_QUEUES:
        raise ValidationError(f"queue name {queue!r} is reserved", field="queue")
    if priority not in PRIORITIES:
        raise ValidationError("priority must be one of high, normal, low", field="priority")
    delay = _number("delay_seconds", 0 if delay_seconds is None else delay_seconds, minimum=0, maximum=MAX_DELAY_S)
    ttl = None if ttl_seconds is None else _number("ttl_seconds", ttl_seconds, minimum=0.001, maximum=MAX_TTL_S)
    if ttl is not None and delay and int(ttl * 1000) <= int(delay * 1000):  # in ms, as they are stored
        # Both count from the submit: such a task could only ever end EXPIRED.
        raise ValidationError(f"ttl_seconds ({ttl:g}) must be longer than delay_seconds ({delay:g}): "
                              "the task would expire before it is due", field="ttl_seconds")
    attempts = config.max_attempts if max_attempts is None else int(
        _number("max_attempts", max_attempts, minimum=1, maximum=MAX_ATTEMPTS_LIMIT, integer=True)
    )
    timeout = config.task_timeout_s if timeout_seconds is None else _number(
        "timeout_seconds", timeout_seconds, minimum=0.001, maximum=MAX_TIMEOUT_S
    )
    if idempotency_key is not None and (
        not isinstance(idempotency_key, str) or not 0 < len(idempotency_key) <= MAX_IDEMPOTENCY_KEY
        or not is_unicode(idempotency_key)
    ):
        raise ValidationError(f"idempotency_key must be a string of 1-{MAX_IDEMPOTENCY_KEY} characters",
                              field="idempotency_key")
    try:
        payload_json = _ENCODE({} if payload is None else payload)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"payload is not JSON-serialisable: {exc}", field="payload") from None
    except RecursionError:
        raise ValidationError("payload is nested too deeply", field="payload") from None
    try:
        # ASCII (the usual payload): its length is its size in UTF-8, and it holds no surrogate.
        size = len(payload_json) if payload_json.isascii() else len(payload_json.encode())
    except UnicodeEncodeError:  # a lone surrogate: from "\ud800" in JSON, or bytes decoded with surrogateescape
        raise ValidationError("payload holds a string that is not valid Unicode (an unpaired surrogate)",
                              field="payload") from None
    if size > config.payload_max_bytes:
        raise PayloadTooLarge(
            f"payload is {size} bytes; the limit is {config.payload_max_bytes} (DTQ_PAYLOAD_MAX_BYTES)",
            field="payload",
        )
    if request_id is not None:
        request_id = str(request_id)[:MAX_REQUEST_ID].encode(errors="replace").decode()
    return Submission(
        type=type, payload_json=payload_json, queue=queue, priority=priority,
        delay_s=float(delay), ttl_s=None if ttl is None else float(ttl), max_attempts=attempts,
        timeout_s=float(timeout), idempotency_key=idempotency_key, request_id=request_id,
        handler="" if handler in (None, type) else handler,
    )
