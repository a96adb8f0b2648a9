"""Tasks: submit (one or a batch, checked against the types workers serve), read one, list the
recent ones, cancel (audited)."""

from __future__ import annotations

import builtins
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import codec
from ..clock import iso
from ..errors import (
    CancelRequested,
    ErrorCode,
    QueueFull,
    QueueLimitReached,
    TaskNotFound,
    TaskTerminal,
    UnknownTaskType,
    ValidationError,
    raise_for_code,
)
from ..keys import PRIORITIES, Keys
from ..replies import text_list
from ..submit import Submission, validate
from ..task import TERMINAL
from . import reads
from .audit import Actor, Audit
from .plumbing import Noun, Plumbing
from .reads import SCORE_RE, Page, page_limit, queue_filter, stream_fields, type_filter

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


class Tasks(Noun):
    """Submit, read, list and cancel tasks."""

    def __init__(self, plumbing: Plumbing, audit: Audit) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self._types: tuple[float, frozenset[str]] | None = None  # (read at, monotonic) served task types

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
            self._types = (now, frozenset(text_list(self.client.hkeys(self.keys.task_types()))))
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

    def enqueue_many(self, submissions: Sequence[Submission]
                     ) -> builtins.list[Enqueued | QueueFull | QueueLimitReached]:
        """Queue validated submissions in one pipelined round trip, in order."""
        pipe = self.client.pipeline(transaction=False)
        for submission in submissions:
            self._enqueue_script(submission, client=pipe, with_record=False)
        replies = self.replication.execute(pipe)  # with DTQ_REDIS_MIN_REPLICAS, WAITs for replicas
        out: builtins.list[Enqueued | QueueFull | QueueLimitReached] = []
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

    def _enqueued(self, s: Submission, reply: builtins.list[Any]) -> Enqueued:
        code = raise_for_code(reply[0], task_id=s.task_id, script="enqueueTask", queue=s.queue, count=reply[1],
                              max_depth=self.config.max_queue_depth, max_queues=self.config.max_queues)
        record = _pairs(reply[3])
        if code is ErrorCode.EXISTING:
            # An expired task hash leaves task None: get_task then answers TASK_NOT_FOUND.
            task = codec.task_view(record, reply[4] or None) if record else None
            return Enqueued(id=str(reply[1]), status=str(reply[2]) or "UNKNOWN", created=False, task=task)
        return Enqueued(id=str(reply[1]), status=str(reply[2]), created=True,
                        task=codec.task_view(record) if record else None)

    def get(self, task_id: str) -> dict[str, Any]:
        """Return the task as the API shows it (with `result` when stored); raise TaskNotFound."""
        fields, result = self.record(task_id)
        return codec.task_view(fields, result)

    def record(self, task_id: str) -> tuple[dict[str, str], str | None]:
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

    def list(self, *, queue: str | None = None, status: str | None = None,
             type: str | None = None, cursor: str | None = None, limit: int | None = None) -> Page:
        """Recent tasks, newest first, filtered; the cursor is "<created ms>-<tasks of that ms seen>".

        Many tasks share a millisecond (a batch submit), so the cursor resumes by offset within
        that score instead of skipping the rest of it. Scores only grow (creation time), so the
        members of a past millisecond do not change between pages.
        """
        limit = page_limit(limit)
        queue, type = queue_filter(queue), type_filter(type)
        upper, seen_at_score, last_score = "+inf", 0, None
        if cursor:
            score, _, seen = cursor.partition("-")
            if not SCORE_RE.fullmatch(score) or not seen.isascii() or not seen.isdigit() or len(seen) > 9:
                raise ValidationError("invalid cursor", field="cursor")
            upper, seen_at_score, last_score = score, int(seen), int(score)
        offset = seen_at_score
        filtering = bool(queue or status or type)
        # One match past the page says whether an older page exists (see DeadLetters.list).
        target = limit + 1
        items: builtins.list[dict[str, Any]] = []
        positions: builtins.list[str] = []  # the cursor that resumes just behind each item
        scanned, exhausted = 0, False
        # The filters run in Redis (scanRecentTasks), so only matching records travel.
        while len(items) < target and scanned < reads.SCAN_BUDGET and not exhausted:
            want = min(500, reads.SCAN_BUDGET - scanned) if filtering else min(500, target - len(items))
            examined, read, score_passed, seen_passed, records, after = self.scripts(
                "scanRecentTasks", keys=[self.keys.recent(), self.keys.task_prefix()],
                args=[upper, offset, want, queue or "", status or "", type or "",
                      target - len(items), "" if last_score is None else last_score, seen_at_score,
                      reads.SCAN_CALL_BYTES])
            scanned += int(examined)
            offset += int(examined)
            if score_passed:
                last_score, seen_at_score = int(float(score_passed)), int(seen_passed)
            items.extend(codec.task_view(stream_fields(record)) for record in records)
            positions.extend(f"{int(float(score))}-{seen}" for score, seen in after)
            exhausted = int(examined) == int(read) < want and len(items) < target  # it passed the oldest
        if len(items) > limit:
            return Page(items=items[:limit], next_cursor=positions[limit - 1])
        more = not exhausted and last_score is not None
        return Page(items=items, next_cursor=f"{last_score}-{seen_at_score}" if more else None)

    def cancel(self, task_id: str, actor: Actor) -> CancelResult:
        """Cancel a task, audited: at once when it waits, via the worker when it runs.

        The usual refusals (no such task, already finished, a cancel in flight) are answered
        before the intent is written, so they leave no audit entry; one that races in between
        is recorded as refused.
        """
        status, requested = self.client.hmget(self.keys.task(task_id), "status", "cancel_requested") \
            if 0 < len(task_id) <= 128 else (None, None)
        if status is None:
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id)
        if status in TERMINAL:
            raise TaskTerminal(f"task {task_id} is already {status}", task_id=task_id, status=status)
        if status == "RUNNING" and requested == "1":
            raise CancelRequested(f"task {task_id} is running; its cancellation is in flight", task_id=task_id)
        with self.audit.operation(actor, "task.cancel", f"task:{task_id}", selected=1,
                                  selection={"task_ids": [task_id]}) as op:
            result = self._cancel(task_id)
            op.done = 1
        return result

    def _cancel(self, task_id: str) -> CancelResult:
        """Cancel without an audit entry (cancel() records one around this)."""
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


def _pairs(flat: list[Any]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _plausible_id(task_id: str) -> bool:
    return isinstance(task_id, str) and 0 < len(task_id) <= 128 and ":" not in task_id
