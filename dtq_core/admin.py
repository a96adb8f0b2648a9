"""Operator actions (pause, resume, purge, delete, DLQ retry/discard, cancel), each audited (audit.py).

Mixed into Engine so the API, CLI and console share every operation and every count.
Bulk actions snapshot what matched first, write their intent to the audit stream, then act in
pipelined batches, recording progress after each, and write their outcome last.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .clock import iso
from .errors import CancelRequested, QueueNotFound, TaskNotFound, TaskTerminal, ValidationError, raise_for_code
from .inspect import queue_filter, type_filter, valid_stream_id
from .keys import PRIORITIES, Keys
from .task import TERMINAL, valid_queue_name

if TYPE_CHECKING:
    from .audit import Operation
    from .engine import Engine

BATCH = 500
PIPELINE_DEPTH = 8  # script calls per round trip in bulk actions
MAX_SELECTION = 1_000_000
MAX_LISTED = 10_000  # ids or task ids in one bulk request


@dataclass(frozen=True, kw_only=True, slots=True)
class Actor:
    """Who did it, for the audit stream: `user:<name>`, `api-key:<sha8>`, `api:anonymous`, `cli:<user>`."""

    name: str
    source: str  # api | console | cli
    request_id: str = ""

    @classmethod
    def user(cls, username: str, *, source: str, request_id: str = "") -> Actor:
        return cls(name=f"user:{username}", source=source, request_id=request_id)

    @classmethod
    def api_key(cls, key: str, *, request_id: str = "") -> Actor:
        return cls(name=f"api-key:{hashlib.sha256(key.encode()).hexdigest()[:8]}", source="api",
                   request_id=request_id)

    @classmethod
    def anonymous_api(cls, *, request_id: str = "") -> Actor:
        return cls(name="api:anonymous", source="api", request_id=request_id)

    @classmethod
    def cli(cls) -> Actor:
        try:
            who = getpass.getuser()
        except (KeyError, OSError):
            who = "unknown"
        # One request id per command run, so its audit entry can be quoted like an API call's.
        return cls(name=f"cli:{who}", source="cli", request_id=uuid.uuid4().hex)


@dataclass(frozen=True, kw_only=True, slots=True)
class DlqSelection:
    """Which dead letters a bulk action touches; exactly one way of choosing is set."""

    ids: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()
    queue: str | None = None
    type: str | None = None
    q: str | None = None
    all: bool = False

    @classmethod
    def from_body(cls, body: Any) -> DlqSelection:
        """Parse an API/console body; an empty body is refused so nothing is retried by accident."""
        if not isinstance(body, dict):
            raise ValidationError("body must be a JSON object")
        unknown = set(body) - {"ids", "task_ids", "queue", "type", "q", "all"}
        if unknown:
            raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}")
        for name in ("ids", "task_ids"):
            value = body.get(name)
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)
                                      or len(value) > MAX_LISTED):
                raise ValidationError(f"{name} must be a list of at most {MAX_LISTED} strings", field=name)
        for name in ("queue", "type", "q"):
            if body.get(name) is not None and (not isinstance(body[name], str) or len(body[name]) > 200):
                raise ValidationError(f"{name} must be a string of at most 200 characters", field=name)
        if "all" in body and not isinstance(body["all"], bool):
            raise ValidationError("all must be true or false", field="all")
        selection = cls(ids=tuple(body.get("ids") or ()), task_ids=tuple(body.get("task_ids") or ()),
                        queue=body.get("queue") or None, type=body.get("type") or None, q=body.get("q") or None,
                        all=bool(body.get("all")))
        if not selection.chooses_something():
            raise ValidationError('say which entries: {"ids": [...]}, {"task_ids": [...]}, filters '
                                  '{"queue", "type", "q"}, or {"all": true}')
        selection.check()
        return selection

    def check(self) -> None:
        """Refuse ids Redis could not parse and selections that mix ways of choosing."""
        bad = next((i for i in self.ids if not valid_stream_id(i)), None)
        if bad is not None:
            raise ValidationError(f"{bad[:80]!r} is not a DLQ entry id (like 1700000000000-0)", field="ids")
        queue_filter(self.queue)
        type_filter(self.type)
        if any(not 0 < len(t) <= 128 for t in self.task_ids):
            raise ValidationError("task_ids must be 1-128 characters each", field="task_ids")
        if self.ids and self.task_ids:
            raise ValidationError("give ids or task_ids, not both")
        if (self.ids or self.task_ids) and (self.queue or self.type or self.q or self.all):
            raise ValidationError("ids/task_ids cannot be combined with filters or all")

    def chooses_something(self) -> bool:
        return bool(self.ids or self.task_ids or self.queue or self.type or self.q or self.all)

    def audited(self) -> dict[str, Any]:
        """The selection as the intent entry records it (long id lists cut to their first 100)."""
        if self.ids:
            return {"ids": list(self.ids[:100]), "ids_total": len(self.ids)}
        if self.task_ids:
            return {"task_ids": list(self.task_ids[:100]), "task_ids_total": len(self.task_ids)}
        return {k: v for k, v in (("queue", self.queue), ("type", self.type), ("q", self.q), ("all", self.all))
                if v}

    def describe(self) -> str:
        if self.ids:
            return "dlq:" + (",".join(self.ids[:5]) + ("..." if len(self.ids) > 5 else ""))
        if self.task_ids:
            return "dlq:tasks:" + (",".join(self.task_ids[:5]) + ("..." if len(self.task_ids) > 5 else ""))
        if self.all and not (self.queue or self.type or self.q):
            return "dlq:all"
        parts = [f"{k}={v}" for k, v in (("queue", self.queue), ("type", self.type), ("q", self.q)) if v]
        return "dlq:" + "&".join(parts)


class AdminMixin:
    # -- audit --------------------------------------------------------------------------------
    def audit(self: Engine, actor: Actor, action: str, target: str, count: int) -> str:
        """Record an action that is already done, as its intent and outcome together."""
        with self.audited(actor, action, target) as op:
            op.done = count
        return op.start_id

    # -- queues -------------------------------------------------------------------------------
    def set_paused(self: Engine, queue: str, paused: bool, actor: Actor) -> bool:
        """Pause or resume a queue; return True when its state changed. Audited either way."""
        k = self.keys
        if not valid_queue_name(queue) or not self.client.sismember(k.queues(), queue):
            raise QueueNotFound(f"queue {queue!r} not found", queue=queue)  # before any audit entry
        with self.audited(actor, "queue.pause" if paused else "queue.resume", f"queue:{queue}", selected=1,
                          selection={"queue": queue}) as op:
            now = self.clock.now_ms()
            changed = int(self.scripts("setPaused", keys=[k.paused(), k.events(), k.event_seq(), k.queues(),
                                                          k.paused_info(), k.ready(), k.wake_any(), k.wake(queue)],
                                       args=[queue, 1 if paused else 0, now, iso(now), actor.name]))
            if changed < 0:
                raise_for_code(changed, task_id=None, script="setPaused", queue=queue)
            op.done = changed
        return bool(changed)

    def purge(self: Engine, queue: str, actor: Actor) -> int:
        """Cancel every task waiting in the queue when the purge starts; return how many."""
        self.queue_detail(queue)
        k = self.keys
        now = self.clock.now_ms()
        pipe = self.client.pipeline(transaction=False)
        for priority in PRIORITIES:
            pipe.xrevrange(k.stream(queue, priority), "+", "-", count=1)
        snapshots = [rows[0][0] if rows else None for rows in pipe.execute()]
        with self.audited(actor, "queue.purge", f"queue:{queue}", selection={"queue": queue}) as op:
            for priority, snapshot in zip(PRIORITIES, snapshots, strict=True):
                after = ""
                while snapshot:
                    cancelled, after = self.scripts(
                        "purgeQueue", keys=[k.stream(queue, priority), k.events(), k.event_seq(), k.stats_tasks(),
                                            k.task_prefix()],
                        args=[Keys.GROUP, now, iso(now), snapshot, BATCH * 4, after,
                              self.config.task_retention_s * 1000],
                    )
                    op.advance(int(cancelled))
                    if not after:
                        break
        self._publish_admin_event("queue.purged", queue, now)
        return op.done

    def delete_queue(self: Engine, queue: str, actor: Actor) -> None:
        """Delete an empty queue (nothing waiting, in flight or scheduled); raise QueueNotEmpty or
        QueueNotFound. Audited when it happened (a refusal withdraws its intent: nothing changed)."""
        k = self.keys
        if not valid_queue_name(queue) or not self.client.sismember(k.queues(), queue):
            raise QueueNotFound(f"queue {queue!r} not found", queue=queue)  # before any audit entry
        with self.audited(actor, "queue.delete", f"queue:{queue}", selected=1, selection={"queue": queue}) as op:
            now = self.clock.now_ms()
            code, *counts = self.scripts(
                "deleteQueue", keys=[k.queues(), k.paused(), k.paused_info(), k.ready(), *k.streams(queue),
                                     k.wake(queue), k.schedule_counts(), k.running(), k.events(), k.event_seq(),
                                     k.task_prefix()],
                args=[queue, Keys.GROUP, now, iso(now)])
            waiting, in_flight, scheduled = (int(c) for c in counts) if counts else (0, 0, 0)
            raise_for_code(code, task_id=None, script="deleteQueue", queue=queue, waiting=waiting,
                           in_flight=in_flight, scheduled=scheduled)
            op.done = 1

    def _publish_admin_event(self: Engine, etype: str, queue: str | None, now: int) -> None:
        seq = self.client.incr(self.keys.event_seq())
        self.client.publish(self.keys.events(), json.dumps(
            {"event_id": f"{now}-{seq}", "type": etype, "task_id": None, "queue": queue, "status": None,
             "attempt": 0, "ts": iso(now)}))

    # -- dead letters -------------------------------------------------------------------------
    def select_dead_letters(self: Engine, selection: DlqSelection) -> list[str]:
        """Snapshot the DLQ entry ids a selection matches right now (newest first)."""
        selection.check()
        if selection.ids:
            return list(dict.fromkeys(selection.ids))
        if selection.task_ids:
            pipe = self.client.pipeline(transaction=False)
            for task_id in selection.task_ids:
                pipe.hget(self.keys.task(task_id), "dlq_entry_id")
            return [eid for eid in dict.fromkeys(pipe.execute()) if eid]
        ids: list[str] = []
        cursor: str | None = None
        while len(ids) < MAX_SELECTION:
            page = self.dlq_list(queue=selection.queue, type=selection.type, q=selection.q, cursor=cursor,
                                 limit=500)
            ids.extend(item["entry_id"] for item in page.items)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        return ids

    def count_dead_letters(self: Engine, selection: DlqSelection) -> int:
        """Count the entries a bulk action would touch now (a dry run: nothing changes)."""
        ids = self.select_dead_letters(selection)
        if not selection.ids:
            return len(ids)
        pipe = self.client.pipeline(transaction=False)
        for entry_id in ids:
            pipe.xrange(self.keys.dlq(), entry_id, entry_id)
        return sum(1 for rows in pipe.execute() if rows)

    def _in_batches(self: Engine, script: str, keys: list[str], fixed: list[object], ids: list[str],
                    op: Operation, changed: Callable[[Any], int]) -> None:
        """Run `script` over ids, BATCH per call, PIPELINE_DEPTH calls per round trip, adding what
        each reply changed to the operation's progress after every round trip.

        Each call is atomic but short, so other clients are never blocked for long; pipelining
        keeps a 10,000-entry action to a few round trips. A process killed between two round
        trips leaves every entry either done or untouched, and the progress recorded last.
        """
        calls = [ids[start:start + BATCH] for start in range(0, len(ids), BATCH)]
        for first in range(0, len(calls), PIPELINE_DEPTH):
            pipe = self.client.pipeline(transaction=False)
            for chunk in calls[first:first + PIPELINE_DEPTH]:
                self.scripts(script, keys=keys, args=[*fixed, *chunk], client=pipe)
            op.advance(sum(changed(reply) for reply in pipe.execute()))

    def retry_dead_letters(self: Engine, selection: DlqSelection, actor: Actor) -> int:
        """Requeue the matching dead letters with a fresh attempt budget; return how many."""
        ids = self.select_dead_letters(selection)
        k = self.keys
        with self.audited(actor, "dlq.retry", selection.describe(), selected=len(ids),
                          selection=selection.audited()) as op:
            now = self.clock.now_ms()
            self._in_batches("retryDeadLetters", [k.dlq(), k.events(), k.event_seq(), k.queues(), k.ready(),
                                                  k.wake_any(), k.task_prefix(), k.stream_prefix(), k.wake_prefix()],
                             [now, iso(now), self.config.task_retention_s * 1000, Keys.GROUP], ids, op,
                             lambda r: int(r[0]))
        return op.done

    def discard_dead_letters(self: Engine, selection: DlqSelection, actor: Actor) -> int:
        """Drop the matching dead letters; return how many."""
        ids = self.select_dead_letters(selection)
        k = self.keys
        with self.audited(actor, "dlq.discard", selection.describe(), selected=len(ids),
                          selection=selection.audited()) as op:
            now = self.clock.now_ms()
            self._in_batches("discardDeadLetters", [k.dlq(), k.events(), k.event_seq(), k.task_prefix()],
                             [now, iso(now), self.config.task_retention_s * 1000], ids, op, int)
        return op.done

    def cancel_as(self: Engine, task_id: str, actor: Actor) -> Any:
        """Cancel, audited (the API, CLI and console path).

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
        with self.audited(actor, "task.cancel", f"task:{task_id}", selected=1,
                          selection={"task_ids": [task_id]}) as op:
            result = self.cancel(task_id)
            op.done = 1
        return result
