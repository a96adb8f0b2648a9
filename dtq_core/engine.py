"""Engine: the service API that views, commands, the console and dtq_tasks call.

Every operation is one pipelined round trip or one script where it can be; reads that shape
records for display live in `inspect.py`, operator actions in `admin.py`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis

from . import codec
from .admin import AdminMixin
from .audit import AuditMixin
from .clock import Clock, SystemClock, iso
from .conf import get_config
from .config import DtqConfig
from .connection import eviction_policy, sync_client
from .errors import ErrorCode, QueueFull, QueueLimitReached, TaskNotFound, UnknownTaskType, raise_for_code
from .inspect import InspectMixin
from .keys import PRIORITIES, Keys
from .scripts import Scripts
from .submit import Submission, validate

RECENT_CAP = 100_000  # tasks kept in the recent-tasks index for listing
TYPES_CACHE_S = 5.0  # how long submit trusts its copy of the registered task types
TYPES_RECHECK_S = 0.5  # an unknown type re-reads them, at most this often (junk cannot hammer Redis)


@dataclass(frozen=True, kw_only=True, slots=True)
class Enqueued:
    id: str
    status: str
    created: bool  # False: an idempotency key matched an earlier task, returned instead
    task: dict[str, Any] | None = None  # the task as get_task shows it (single enqueue only)


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelResult:
    id: str
    status: str
    cancelled: bool  # True: CANCELLED now; False: recorded, the worker will stop the handler


class Engine(InspectMixin, AdminMixin, AuditMixin):
    def __init__(self, config: DtqConfig, *, client: redis.Redis | None = None, clock: Clock | None = None) -> None:
        self.config = config
        self.keys = Keys(config.key_prefix)
        self.client = client if client is not None else sync_client(config)
        self.clock: Clock = clock or SystemClock()
        self.scripts = Scripts(self.client)
        self._types: tuple[float, frozenset[str]] | None = None  # (read at, monotonic) served task types

    # -- submit -----------------------------------------------------------------------------
    def validate(self, type: Any, payload: Any = None, **options: Any) -> Submission:
        """Check a submission; raise ValidationError (UnknownTaskType: no worker serves it).

        What a worker must serve is the submission's handler_name: its type, or for a Django task
        (type = the function's import path) the Django runner, django.task or django.atask.
        """
        submission = validate(self.config, type, payload, **options)
        self.check_type(submission.handler_name)
        return submission

    def check_type(self, type: str) -> None:
        """Refuse a task type no worker has registered (the types hash: see registerTypes-1.lua).

        Accepted: any type while no worker has ever registered (a fresh install) or with
        DTQ_ACCEPT_UNKNOWN_TYPES=true. The types are cached for TYPES_CACHE_S; a miss re-reads
        them (at most every TYPES_RECHECK_S), so a worker that just started is seen at once.
        """
        if self.config.accept_unknown_types:
            return
        types = self._served_types(max_age_s=TYPES_CACHE_S)
        if types and type not in types:
            types = self._served_types(max_age_s=TYPES_RECHECK_S)
        if types and type not in types:
            raise UnknownTaskType(
                f"no worker serves task type {type!r}: register a handler for it (@dtq_tasks.task) and start "
                "a worker with it, or set DTQ_ACCEPT_UNKNOWN_TYPES=true", field="type")

    def _served_types(self, *, max_age_s: float) -> frozenset[str]:
        now = time.monotonic()
        if self._types is None or now - self._types[0] > max_age_s:
            self._types = (now, frozenset(self.client.hkeys(self.keys.task_types())))
        return self._types[1]

    def served_types(self) -> frozenset[str]:
        """The task types registered by workers (no cache)."""
        return self._served_types(max_age_s=0)

    def enqueue(self, type: Any, payload: Any = None, *, record: bool = True, **options: Any) -> Enqueued:
        """Queue up a task; raise ValidationError, PayloadTooLarge, QueueFull or QueueLimitReached.

        record=False leaves Enqueued.task None: for callers that only want the id, it saves
        reading the record back and shaping it.
        """
        submission = self.validate(type, payload, **options)
        reply = self._enqueue_script(submission, client=None, with_record=record)
        return self._enqueued(submission, reply)

    def enqueue_many(self, submissions: Sequence[Submission]) -> list[Enqueued | QueueFull | QueueLimitReached]:
        """Queue validated submissions in one pipelined round trip, in order."""
        pipe = self.client.pipeline(transaction=False)
        for submission in submissions:
            self._enqueue_script(submission, client=pipe, with_record=False)
        replies = pipe.execute()
        out: list[Enqueued | QueueFull | QueueLimitReached] = []
        for submission, reply in zip(submissions, replies, strict=True):
            try:
                out.append(self._enqueued(submission, reply))
            except (QueueFull, QueueLimitReached) as exc:
                out.append(exc)
        return out

    def _enqueue_script(self, s: Submission, *, client: Any, with_record: bool) -> Any:
        now = self.clock.now_ms()
        due = now + int(s.delay_s * 1000) if s.delay_s > 0 else 0
        expires = now + int(s.ttl_s * 1000) if s.ttl_s else ""
        fields: list[object] = [
            "type", s.type, "queue", s.queue, "priority", s.priority, "payload", s.payload_json,
            "max_attempts", s.max_attempts, "timeout_s", f"{s.timeout_s:g}", "expires_at", expires,
            "idempotency_key", s.idempotency_key or "", "request_id", s.request_id or "",
        ]
        if s.handler:
            fields += ["handler", s.handler]
        k = self.keys
        keys = [k.task(s.task_id), k.idem(s.idempotency_key or ""), *k.streams(s.queue), k.schedule(),
                k.queues(), k.events(), k.event_seq(), k.recent(), k.wake(s.queue), k.ready(), k.wake_any(),
                k.task_prefix(), k.result_prefix()]
        args = [s.task_id, PRIORITIES.index(s.priority) + 1, now, iso(now), self.config.task_retention_s * 1000,
                self.config.idem_ttl_s * 1000, self.config.max_queue_depth, due, s.queue, Keys.GROUP,
                1 if s.idempotency_key else 0, RECENT_CAP, 1 if with_record else 0,
                self.config.max_queues, *fields]
        if client is None:
            return self.scripts.call_direct("enqueueTask", keys=keys, args=args)
        return self.scripts("enqueueTask", keys=keys, args=args, client=client)

    def _enqueued(self, s: Submission, reply: list[Any]) -> Enqueued:
        code = raise_for_code(reply[0], task_id=s.task_id, script="enqueueTask", queue=s.queue, count=reply[1],
                              max_depth=self.config.max_queue_depth, max_queues=self.config.max_queues)
        record = _pairs(reply[3])
        if code is ErrorCode.EXISTING:
            # An expired task hash leaves task None: get_task then answers TASK_NOT_FOUND.
            task = codec.task_view(record, reply[4] or None) if record else None
            return Enqueued(id=str(reply[1]), status=str(reply[2]) or "UNKNOWN", created=False, task=task)
        return Enqueued(id=str(reply[1]), status=str(reply[2]), created=True,
                        task=codec.task_view(record) if record else None)

    # -- read one -----------------------------------------------------------------------------
    def get_task(self, task_id: str) -> dict[str, Any]:
        """Return the task as the API shows it (with `result` when stored); raise TaskNotFound."""
        fields, result = self.task_record(task_id)
        return codec.task_view(fields, result)

    def task_record(self, task_id: str) -> tuple[dict[str, str], str | None]:
        """Return the raw task hash and stored result JSON in one round trip; raise TaskNotFound."""
        if not _plausible_id(task_id):
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self.keys.task(task_id))
        pipe.get(self.keys.result(task_id))
        fields, result = pipe.execute()
        if not fields:
            raise TaskNotFound(f"task {task_id!r} not found (it may have expired)", task_id=task_id)
        return fields, result

    # -- cancel -------------------------------------------------------------------------------
    def cancel(self, task_id: str) -> CancelResult:
        """Cancel a task: at once when it waits, via the worker when it runs."""
        if not _plausible_id(task_id):
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id)
        now = self.clock.now_ms()
        code, *rest = self.scripts(
            "cancelTask",
            keys=[self.keys.task(task_id), self.keys.schedule(), self.keys.events(), self.keys.event_seq(),
                  self.keys.stats_tasks(), self.keys.stream_prefix()],
            args=[task_id, now, iso(now), self.config.task_retention_s * 1000],
        )
        code = raise_for_code(code, task_id=task_id, script="cancelTask", status=rest[0] if rest else None)
        return CancelResult(id=task_id, status=str(rest[0]), cancelled=code is ErrorCode.OK)

    # -- health -------------------------------------------------------------------------------
    def ping(self) -> bool:
        return bool(self.client.ping())

    def eviction_policy(self) -> str | None:
        """Redis's maxmemory-policy (None: could not be read); dtq needs noeviction."""
        return eviction_policy(self.client)


def _pairs(flat: list[Any]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _plausible_id(task_id: str) -> bool:
    return isinstance(task_id, str) and 0 < len(task_id) <= 128 and ":" not in task_id


_engine: Engine | None = None


def get_engine() -> Engine:
    """The process-wide Engine built from settings.DTQ; rebuilt when the settings change."""
    global _engine
    config = get_config()  # a new DtqConfig after conf reloads settings.DTQ
    if _engine is None or _engine.config is not config:
        _engine = Engine(config)
    return _engine


def reset_engine() -> None:
    global _engine
    _engine = None
