"""Validation of a task submission, shared by dtq_tasks.enqueue, the API and the Django backend,
and the making of task ids."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from .codec import is_unicode
from .config import DtqConfig
from .encryption import encrypts, seal
from .errors import PayloadTooLarge, ValidationError
from .keys import PRIORITIES
from .middleware import run_enqueue_middleware
from .task import QUEUE_NAME_RE, RESERVED_QUEUES, TASK_TYPE_RE

MAX_DELAY_S = 366 * 86400
MAX_TTL_S = 366 * 86400
MAX_ATTEMPTS_LIMIT = 100
MAX_TIMEOUT_S = 7 * 86400
MAX_IDEMPOTENCY_KEY = 200
MAX_REQUEST_ID = 200
MAX_GROUP_KEY = 200
MAX_UNIQUE_KEY = 200
UNIQUE_MODES = ("while_active", "throttle", "debounce")
# Task headers (trace context, an enqueue middleware's metadata): small string pairs.
MAX_HEADERS = 32
MAX_HEADER_VALUE = 1024
MAX_HEADERS_BYTES = 4096
HEADER_NAME_RE = re.compile(r"[A-Za-z0-9_.-]{1,64}")
# How deep arrays and objects may nest in a payload, and in a JSON body the API reads (dtq_api
# parsers). Deep enough for any real payload; far enough below the recursion limit (1000) that
# parsing, storing and answering a value this deep never comes near it, however deep the stack
# already is: json.dumps takes about a thousand levels, and json.loads a little fewer, so a
# deeper payload would be queued but could not be read back.
MAX_JSON_DEPTH = 200

# For the nesting depth: JSON text cut down to its brackets, strings taken out (see nested_deeper_than).
_ESCAPE = re.compile(rb"\\.", re.DOTALL)
_STRING_WITHOUT_ESCAPES = re.compile(rb'"[^"]*"')
_ALL_BUT_QUOTES_AND_BRACKETS = bytes(b for b in range(256) if b not in b'"[]{}')
_BRACKET_STEP = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1 and -1 as signed bytes

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
    # Flow control (issue 22): the task's group for group_concurrency/group_rate ("" = none).
    group_key: str = ""
    unique: Unique | None = None  # a unique task (issue 22; see check_unique)
    # Its headers as stored ("" = none): trace context, metadata an enqueue middleware added.
    headers_json: str = ""

    def placed(self, tag: str) -> Submission:
        """This submission in partition `tag`, under a new id that names it."""
        # Spelled out: dataclasses.replace inspects the fields on every call, a tenth of the
        # client's work per enqueue.
        return Submission(type=self.type, payload_json=self.payload_json, queue=self.queue,
                          priority=self.priority, delay_s=self.delay_s, ttl_s=self.ttl_s,
                          max_attempts=self.max_attempts, timeout_s=self.timeout_s,
                          idempotency_key=self.idempotency_key, request_id=self.request_id,
                          handler=self.handler, task_id=new_task_id(tag), group_key=self.group_key,
                          unique=self.unique, headers_json=self.headers_json)

    @property
    def handler_name(self) -> str:
        """The name a worker must have registered to run this task."""
        return self.handler or self.type


@dataclass(frozen=True, slots=True)
class Unique:
    """A submission's unique-task fields, checked (docs/tasks.md, "Unique tasks")."""

    key: str
    mode: str  # one of UNIQUE_MODES
    window_s: float  # 0.0: none given (while_active's default cap)

    @property
    def arg(self) -> str:
        """The enqueue script's last argument: "<mode>|<window ms>|<key>" (the key last: it may hold a |)."""
        return f"{self.mode}|{int(self.window_s * 1000)}|{self.key}"

    def answer(self, existing: bool) -> dict[str, object]:
        """What a submit's answer says of it: {"existing", "mode", "key"}."""
        return {"existing": existing, "mode": self.mode, "key": self.key}


def new_task_id(tag: str) -> str:
    """A task id: its partition's tag, a dash, 32 hex digits (dtq_core.keys.TASK_ID_RE), so a
    lookup by id finds the partition's slot. At most 49 characters: ids stay under 64."""
    return f"{tag}-{os.urandom(16).hex()}"  # 128 random bits, as uuid4's 122, without its object


def _number(name: str, value: Any, *, minimum: float, maximum: float, integer: bool = False) -> float:
    # An int is finite however long (JSON's 1 followed by 400 zeros), but math.isfinite and
    # float() raise OverflowError on one past float's range: the range check comes first.
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or (isinstance(value, float) and not math.isfinite(value)):
        raise ValidationError(f"{name} must be a number", field=name)
    if not minimum <= value <= maximum:
        raise ValidationError(f"{name} must be between {minimum:g} and {maximum:g}", field=name)
    if integer and not float(value).is_integer():
        raise ValidationError(f"{name} must be a whole number", field=name)
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
    group_key: Any = None,
    unique_key: Any = None,
    unique_mode: Any = None,
    unique_window_s: Any = None,
    headers: Any = None,
) -> Submission:
    """Check every field of a submission; raise ValidationError / PayloadTooLarge naming it.

    The enqueue middleware (DTQ_ENQUEUE_MIDDLEWARE) sees it first and may change its payload and
    headers, or refuse it (TaskRefused); what it leaves is then checked like the rest."""
    if config.enqueue_middleware:
        payload, headers = run_enqueue_middleware(config, type, payload, queue, priority, headers)
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
    if group_key is not None and (
        not isinstance(group_key, str) or not 0 < len(group_key) <= MAX_GROUP_KEY or not is_unicode(group_key)
    ):
        raise ValidationError(f"group_key must be a string of 1-{MAX_GROUP_KEY} characters", field="group_key")
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
    if nested_deeper_than(payload_json, MAX_JSON_DEPTH):  # a normal payload: two str.count at most
        raise ValidationError(f"payload nests arrays and objects more than {MAX_JSON_DEPTH} levels deep",
                              field="payload")
    if config.encrypt_types and encrypts(config.encrypt_types, type):  # checked in plaintext, stored sealed
        payload_json = seal(config.encryption_keys, payload_json)
    if request_id is not None:
        request_id = str(request_id)[:MAX_REQUEST_ID].encode(errors="replace").decode()
    submission = Submission(
        type=type, payload_json=payload_json, queue=queue, priority=priority,
        delay_s=float(delay), ttl_s=None if ttl is None else float(ttl), max_attempts=attempts,
        timeout_s=float(timeout), idempotency_key=idempotency_key, request_id=request_id,
        handler="" if handler in (None, type) else handler, group_key=group_key or "",
        headers_json="" if not headers else check_headers(headers),
    )
    if unique_key is None and unique_mode is None and unique_window_s is None:
        return submission
    return check_unique(submission, unique_key, unique_mode, unique_window_s)


def nested_deeper_than(text: str, limit: int) -> bool:
    """Whether JSON text nests arrays and objects more than limit deep; brackets in strings do not count.

    1. JSON deeper than the limit holds more than limit openings and as many closings: a short
       text (the usual payload) cannot be, and two counts settle most others.
    2. Else cut the text to its quotes and brackets, escapes taken out first (so an escaped quote
       neither opens nor closes a string), drop the strings, and take the deepest running sum
       of +1 per opening and -1 per closing: all in C, a fraction of what parsing costs.
    Text that is not JSON may pass (unclosed brackets): a parser refuses it, short of the
    recursion limit.
    """
    if len(text) <= 2 * limit or text.count("[") + text.count("{") <= limit:
        return False
    skeleton = _ESCAPE.sub(b"", text.encode("utf-8", "surrogatepass")).translate(None, _ALL_BUT_QUOTES_AND_BRACKETS)
    skeleton = skeleton.replace(b'""', b"")  # strings without a bracket in them: nearly all
    if b'"' in skeleton:
        skeleton = _STRING_WITHOUT_ESCAPES.sub(b"", skeleton)
    steps = memoryview(skeleton.translate(_BRACKET_STEP, b'"')).cast("b")  # an unclosed string's quote out too
    return max(accumulate(steps), default=0) > limit


def check_headers(headers: Any) -> str:
    """The headers as stored (compact JSON), or ValidationError naming what is wrong."""
    if not isinstance(headers, dict):
        raise ValidationError("headers must be an object of string names to string values", field="headers")
    if len(headers) > MAX_HEADERS:
        raise ValidationError(f"headers may hold at most {MAX_HEADERS} entries", field="headers")
    for name, value in headers.items():
        if not isinstance(name, str) or not HEADER_NAME_RE.fullmatch(name):
            raise ValidationError(f"header name {str(name)[:80]!r} must be 1-64 of A-Z a-z 0-9 _ . -", field="headers")
        if not isinstance(value, str) or len(value) > MAX_HEADER_VALUE or not is_unicode(value):
            raise ValidationError(f"header {name!r} must be a string of at most {MAX_HEADER_VALUE} characters",
                                  field="headers")
    encoded = _ENCODE(headers)
    if len(encoded.encode()) > MAX_HEADERS_BYTES:
        raise ValidationError(f"headers are {len(encoded.encode())} bytes of JSON; the limit is {MAX_HEADERS_BYTES}",
                              field="headers")
    return encoded


def check_unique(s: Submission, key: Any, mode: Any, window_s: Any) -> Submission:
    """The submission with its unique-task fields checked (docs/tasks.md, "Unique tasks").

    Kept out of validate's main line: a submit without them pays three `is None` checks."""
    if key is None:
        name = "unique_mode" if mode is not None else "unique_window_s"
        raise ValidationError(f"{name} needs a unique_key", field=name)
    if not isinstance(key, str) or not 0 < len(key) <= MAX_UNIQUE_KEY or not is_unicode(key):
        raise ValidationError(f"unique_key must be a string of 1-{MAX_UNIQUE_KEY} characters", field="unique_key")
    if mode is None:
        raise ValidationError(f"unique_key needs a unique_mode: one of {', '.join(UNIQUE_MODES)}",
                              field="unique_mode")
    if mode not in UNIQUE_MODES:
        raise ValidationError(f"unique_mode must be one of {', '.join(UNIQUE_MODES)}", field="unique_mode")
    if window_s is None:
        if mode != "while_active":
            raise ValidationError(f"unique_mode {mode} needs unique_window_s (seconds, more than 0)",
                                  field="unique_window_s")
        window = 0.0
    else:
        window = float(_number("unique_window_s", window_s, minimum=0.001, maximum=MAX_DELAY_S))
    if s.ttl_s is not None and mode == "debounce" and int(s.ttl_s * 1000) <= int((s.delay_s + window) * 1000):
        # A debounced task waits delay + window: such a ttl could only ever end it EXPIRED.
        raise ValidationError(f"ttl_seconds ({s.ttl_s:g}) must be longer than delay_seconds + unique_window_s "
                              f"({s.delay_s + window:g}): a debounced task waits both", field="ttl_seconds")
    return dataclasses.replace(s, unique=Unique(key, mode, window))
