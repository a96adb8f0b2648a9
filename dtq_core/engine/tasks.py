"""Tasks: submit (one or a batch, checked against the types workers serve, each task placed in a
partition of its queue), read one, list the recent ones of every partition, cancel (audited)."""

from __future__ import annotations

import builtins
import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, cast

import redis

from .. import codec, hooks
from ..clock import iso
from ..errors import (
    CancelRequested,
    ErrorCode,
    PartitionClosed,
    QueueFull,
    QueueLimitReached,
    TaskNotFound,
    TaskNotScheduled,
    TaskRunning,
    TaskTerminal,
    UnknownTaskType,
    ValidationError,
    raise_for_code,
)
from ..events import EventsGate
from ..integrations import otel
from ..keys import is_task_id, tag_of
from ..partitions import Layout
from ..replies import text_list
from ..routing import is_cluster
from ..submit import Submission, validate
from ..task import TASK_TYPE_RE, TERMINAL
from .audit import Actor, Audit, audit_selection
from .plumbing import Noun, Plumbing
from .reads import Page, page_limit, queue_filter, type_filter
from .recent import RecentTasks, make_search, parse_cursor
from .registry import Registry

RECENT_CAP = 100_000  # tasks kept in each partition's recent-tasks index for listing
BULK_CHUNK = 100  # tasks per enqueueTasks call: one call runs alone in Redis, so it stays a few ms
BULK_CHUNK_BYTES = 1 << 20  # and payload bytes per call: 100 payloads of up to 1 MB would be one 100 MB call
TYPES_CACHE_S = 5.0  # how long submit trusts its copy of the registered task types
TYPES_RECHECK_S = 0.5  # an unknown type re-reads them, at most this often (junk cannot hammer Redis)


def failed_in_redis(outcome: object) -> TypeGuard[Exception]:
    """An outcome of Tasks.enqueue_each for a task whose call Redis failed (not one dtq refused:
    a full queue, the bound on queues): it may or may not have been queued."""
    return isinstance(outcome, Exception) and not isinstance(outcome, (QueueFull, QueueLimitReached))


@dataclass(frozen=True, kw_only=True, slots=True)
class Enqueued:
    id: str
    status: str
    created: bool  # False: an idempotency key matched an earlier task, returned instead
    task: dict[str, Any] | None = None  # the task as get_task shows it (single enqueue only)
    # With a unique_key: {"existing": bool, "mode", "key"} (existing: a task holding the key, or
    # the one an idempotency key named, was returned instead of a new one). None without one.
    unique: dict[str, Any] | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class CancelResult:
    id: str
    status: str
    cancelled: bool  # True: CANCELLED now; False: recorded, the worker will stop the handler


class Tasks(Noun):
    """Submit, read, list and cancel tasks."""

    def __init__(self, plumbing: Plumbing, audit: Audit, registry: Registry) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.registry = registry
        self.recent = RecentTasks(plumbing)
        self.events = EventsGate(self.config, self.keys)  # task.queued only while someone listens
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
        types = self._served_types(max_age_s=TYPES_CACHE_S, stale_ok=True)
        if types and type not in types:
            types = self._served_types(max_age_s=TYPES_RECHECK_S)
        if types and type not in types:
            raise UnknownTaskType(
                f"no worker serves task type {type!r}: register a handler for it (@dtq_tasks.task) and start "
                "a worker with it, or set DTQ_ACCEPT_UNKNOWN_TYPES=true", field="type")

    def _served_types(self, *, max_age_s: float, stale_ok: bool = False) -> frozenset[str]:
        """The types, read anew past max_age_s. stale_ok: a cached copy of any age when the read
        fails on a cluster (the types' master is down): a known type goes on to its partition; a
        miss reads again without it, so an unknown type is Redis trouble then, never refused."""
        now = time.monotonic()
        if self._types is None or now - self._types[0] > max_age_s:
            try:
                self._types = (now, frozenset(text_list(self.client.hkeys(self.keys.task_types()))))
            except redis.exceptions.RedisError:
                if not stale_ok or self._types is None or not is_cluster(self.client):
                    raise
                self._types = (now, self._types[1])  # read again in max_age_s, not on every submit
        return self._types[1]

    def served_types(self) -> frozenset[str]:
        """The task types registered by workers (no cache)."""
        return self._served_types(max_age_s=0)

    def enqueue(self, type: Any, payload: Any = None, *, record: bool = True, **options: Any) -> Enqueued:
        """Queue up a task; raise ValidationError, PayloadTooLarge, QueueFull or QueueLimitReached.

        record=False leaves Enqueued.task None: for callers that only want the id, it saves
        reading the record back and shaping it. One round trip to a queue this process knows.
        """
        submission, layout = self.place(self.validate(type, payload, **options))
        if otel.enabled(self.config):  # a PRODUCER span around the send, its context in the headers
            with otel.publishing([submission]) as (submission,):
                return self._enqueue_placed(submission, layout, record)
        return self._enqueue_placed(submission, layout, record)

    def _enqueue_placed(self, submission: Submission, layout: Layout, record: bool) -> Enqueued:
        (reply,) = self._run([self._enqueue_call(submission, layout, with_record=record)])
        if _closed(reply):  # the queue was deleted (and maybe created again) since we read it
            submission, layout = self.place(submission, again=True)
            (reply,) = self._run([self._enqueue_call(submission, layout, with_record=record)])
        enqueued = self._enqueued(submission, layout, reply)
        if hooks.SIGNALS is not None and enqueued.created:
            _queued(submission)
        return enqueued

    def enqueue_as(self, actor: Actor, type: Any, payload: Any = None, **options: Any) -> Enqueued:
        """enqueue, audited as `task.enqueue` by actor (an operator's submit from the console), its
        target the queue and its selection the type and the new task's id."""
        queue = options.get("queue", "default")
        with self.audit.operation(actor, "task.enqueue", f"queue:{queue}", selected=1,
                                  selection={"type": type, "queue": queue}) as op:
            enqueued = self.enqueue(type, payload, request_id=actor.request_id or None, **options)
            # The outcome entry names the task, so the trail leads to what the operator made.
            op.selection = audit_selection({"type": type, "queue": queue, "task_id": enqueued.id})
            op.done = 1
        return enqueued

    def enqueue_many(self, submissions: Sequence[Submission]
                     ) -> builtins.list[Enqueued | QueueFull | QueueLimitReached]:
        """Queue validated submissions in one round trip, in order (a new queue adds its
        registration first; a partition closed meanwhile, a second round for its tasks). A task
        whose call Redis failed raises that error once the others are queued and signalled."""
        outcomes = self.enqueue_each(submissions)
        failed = next((o for o in outcomes if failed_in_redis(o)), None)
        if failed is not None:
            raise failed
        return cast("builtins.list[Enqueued | QueueFull | QueueLimitReached]", outcomes)

    def enqueue_each(self, submissions: Sequence[Submission]
                     ) -> builtins.list[Enqueued | QueueFull | QueueLimitReached | Exception]:
        """enqueue_many answering each task on its own: a task whose call Redis failed gets that
        error (its exception, as redis-py raised it) in its place, and on a cluster a master
        that does not answer fails its own tasks only, the live masters' are queued (a batch
        submit's caller must learn which landed: sending them all again would queue those
        twice)."""
        if otel.enabled(self.config):
            placed_first: builtins.list[Submission] = []  # ids first: each span names its task
            refused: dict[int, Submission] = {}
            for i, s in enumerate(submissions):
                try:
                    placed_first.append(self.place(s)[0])
                except QueueLimitReached:  # no span: _enqueue_many places it again and answers it in its slot
                    refused[i] = s
            with otel.publishing_each(placed_first) as (traced, failed):
                spanned = iter(traced)
                outcomes = self._enqueue_many([refused[i] if i in refused else next(spanned)
                                               for i in range(len(submissions))])
                span = 0  # the span of each placed submission, in order
                for i, outcome in enumerate(outcomes):
                    if i in refused:
                        continue
                    if failed_in_redis(outcome):
                        failed(span, outcome)
                    span += 1
                return outcomes
        return self._enqueue_many(submissions)

    def _enqueue_many(self, submissions: Sequence[Submission]
                      ) -> builtins.list[Enqueued | QueueFull | QueueLimitReached | Exception]:
        placed = builtins.list(submissions)
        out: builtins.list[Enqueued | QueueFull | QueueLimitReached | Exception | None] = [None] * len(placed)
        pending = builtins.list(range(len(placed)))
        for last_round in (False, True):
            calls: builtins.list[tuple[int, Layout]] = []
            unread: redis.exceptions.RedisError | None = None  # the registry's read failed: not read again
            for i in pending:
                if unread is not None and not self.registry.cached(placed[i].queue):
                    out[i] = unread
                    continue
                try:
                    placed[i], layout = self.place(placed[i])
                except QueueLimitReached as exc:
                    out[i] = exc
                    continue
                except redis.exceptions.RedisError as exc:  # once a round: a frozen Redis times out each read
                    out[i] = unread = exc  # not sent; nor the next tasks whose placing needs a read
                    continue
                calls.append((i, layout))
            replies = self._enqueue_batches([(placed[i], layout) for i, layout in calls])
            pending = []
            for (i, layout), reply in zip(calls, replies, strict=True):
                if isinstance(reply, Exception):
                    out[i] = reply
                    continue
                if _closed(reply) and not last_round:
                    pending.append(i)
                    continue
                try:
                    out[i] = self._enqueued(placed[i], layout, reply)
                except (QueueFull, QueueLimitReached) as exc:
                    out[i] = exc
            if not pending:
                break
            try:
                self._reopen({placed[i].queue for i in pending})
            except (redis.exceptions.RedisError, PartitionClosed) as exc:
                for i in pending:  # refused as closed, so not queued; the first round's tasks stand
                    out[i] = exc
                break
        if hooks.SIGNALS is not None:
            for s, o in zip(placed, out, strict=True):
                if isinstance(o, Enqueued) and o.created:
                    _queued(s)
        return [o for o in out if o is not None]

    def place(self, s: Submission, *, again: bool = False) -> tuple[Submission, Layout]:
        """The submission in a partition of its queue, with the queue's layout: its idempotency
        key picks the partition (so a retry finds the first task), otherwise round robin, and the
        task's id names it. A submission already placed in a partition the queue still serves
        keeps its id (the Django backend hands the id out before the commit that enqueues it).
        Registers a new queue: QueueLimitReached past DTQ_MAX_QUEUES.

        again: the enqueue script found the partition closed. The registry is read anew (the
        queue was deleted, or deleted and created again), and the layout's partitions opened,
        which heals one whose registering process died between registering and opening it.
        """
        if again:
            self._reopen({s.queue})
        layout = self.registry.ensure(s.queue)
        # The partition: a group's tasks share one, so its group limits hold exactly
        # (engine/limits.py); else a unique key, else an idempotency key always picks the same one.
        # With a group_key, the unique and idempotency keys are kept within the group's partition.
        key = s.group_key or (s.unique.key if s.unique else s.idempotency_key)
        if s.task_id and tag_of(s.task_id) in layout.tags and (not key or tag_of(s.task_id) == layout.tag_for(key)):
            # Kept only where its key leads: a queue created again with another partition count
            # sends the key elsewhere, where the next submit with it looks.
            return s, layout
        return s.placed(layout.tag_for(key)), layout

    def _reopen(self, queues: set[str]) -> None:
        """Read the registry anew and open the partitions of these queues (see place)."""
        self.registry.forget_cache()
        for queue in sorted(queues):
            try:
                self.registry.open(self.registry.ensure(queue))
            except QueueLimitReached:
                continue  # deleted, and no room to create it again: place() says so per task

    def _run(self, calls: builtins.list[tuple[str, builtins.list[str], builtins.list[object]]]
             ) -> builtins.list[Any]:
        """Script calls in one exchange; Redis trouble is raised (nothing can be said to have landed)."""
        replies = self.scripts.call_direct_many(calls) if calls else []
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _enqueue_call(self, s: Submission, layout: Layout, *, with_record: bool
                      ) -> tuple[str, builtins.list[str], builtins.list[object]]:
        """The enqueueTask call (name, keys, args) that creates the task in its partition."""
        now = self.clock.now_ms()
        due, fields, unique = _task_parts(s, now)
        keys = [self.keys.partition(tag_of(s.task_id))]
        args = [s.task_id, s.priority, now, iso(now), self.config.task_retention_s * 1000,
                self.config.idem_ttl_s * 1000, self.depth_limit(layout), due, layout.owner,
                s.idempotency_key or "", RECENT_CAP, 1 if with_record else 0, self.events.flag(self.client), *fields,
                unique]  # the script's last ARGV (issue 22)
        return "enqueueTask", keys, args

    def _enqueue_batches(self, placed: Sequence[tuple[Submission, Layout]]) -> builtins.list[Any]:
        """enqueueTask's replies for placed submissions, in their order, from one exchange: the
        tasks of one partition go in enqueueTasks calls of at most BULK_CHUNK tasks and
        BULK_CHUNK_BYTES of payload (one call each, not one per task: the call's own cost and the
        depth gate's reads paid once); a partition's only task goes in an enqueueTask. One script
        per partition: a node that lacks a script answers its calls "not found", and they are
        sent again after the exchange, so a partition's chunks in two scripts could land out of
        order when the node had one script and not the other (a later task overtaking an earlier
        one: idempotency, the depth gate and stream order would answer for that other order).
        Each submission's reply, a task's own error as its exception (the batch's others landed)."""
        if not placed:
            return []
        by_partition: dict[str, builtins.list[int]] = {}
        for i, (s, _) in enumerate(placed):
            by_partition.setdefault(self.keys.partition(tag_of(s.task_id)), []).append(i)
        now = self.clock.now_ms()
        events = self.events.flag(self.client)
        calls: builtins.list[tuple[str, builtins.list[str], builtins.list[object]]] = []
        shares: builtins.list[builtins.list[int]] = []  # the submissions each call carries
        for key, indexes in by_partition.items():
            for chunk in _chunks(indexes, [len(placed[i][0].payload_json) for i in indexes]):
                shares.append(chunk)
                if len(indexes) == 1:
                    calls.append(self._enqueue_call(*placed[chunk[0]], with_record=False))
                    continue
                layout = placed[chunk[0]][1]
                args: builtins.list[object] = [
                    now, iso(now), self.config.task_retention_s * 1000, self.config.idem_ttl_s * 1000,
                    self.depth_limit(layout), layout.owner, RECENT_CAP, events]
                for i in chunk:
                    s = placed[i][0]
                    due, fields, unique = _task_parts(s, now)
                    args += [s.task_id, s.priority, due, s.idempotency_key or "", unique, len(fields), *fields]
                calls.append(("enqueueTasks", [key], args))
        replies: builtins.list[Any] = [None] * len(placed)
        answered = self.scripts.call_direct_many(calls, each_master=True)
        for chunk, (name, _, _), reply in zip(shares, calls, answered, strict=True):
            if name == "enqueueTask" or isinstance(reply, Exception):  # a call's error is each of its tasks'
                for i in chunk:
                    replies[i] = reply
                continue
            for i, one in zip(chunk, reply, strict=True):
                replies[i] = one
        return replies

    def depth_limit(self, layout: Layout) -> int:
        """The depth gate of one partition: DTQ_MAX_QUEUE_DEPTH shared evenly by the queue's
        partitions (rounded up), each checked in its own script, as a queue has no one key that
        could hold its total."""
        most = self.config.max_queue_depth
        return most if most <= 0 else math.ceil(most / len(layout.tags))

    def _enqueued(self, s: Submission, layout: Layout, reply: builtins.list[Any]) -> Enqueued:
        if reply[0] == 0 and not reply[3] and s.unique is None:  # created, no record asked for: the usual reply
            return Enqueued(id=str(reply[1]), status=str(reply[2]), created=True)
        if int(reply[0]) == ErrorCode.QUEUE_FULL and len(layout.tags) > 1:
            depth, per = int(reply[1]), self.depth_limit(layout)
            raise QueueFull(f"queue {s.queue!r} is full: the partition this task went to holds {depth} tasks, "
                            f"the limit per partition is {per} (DTQ_MAX_QUEUE_DEPTH {self.config.max_queue_depth} "
                            f"over {len(layout.tags)} partitions)", queue=s.queue, depth=depth)
        code = raise_for_code(reply[0], task_id=s.task_id, script="enqueueTask", queue=s.queue,
                              count=reply[1] if len(reply) > 1 else 0, max_depth=self.config.max_queue_depth)
        record = _pairs(reply[3])
        unique = None if s.unique is None else s.unique.answer(code is ErrorCode.EXISTING)
        if code is ErrorCode.EXISTING:
            # An expired task hash leaves task None: get_task then answers TASK_NOT_FOUND.
            result = codec.stored_result(record, reply[4] or None)
            task = codec.task_view(record, result, str(reply[1])) if record else None
            return Enqueued(id=str(reply[1]), status=str(reply[2]) or "UNKNOWN", created=False, task=task,
                            unique=unique)
        return Enqueued(id=str(reply[1]), status=str(reply[2]), created=True,
                        task=codec.task_view(record, task_id=str(reply[1])) if record else None, unique=unique)

    def get(self, task_id: str) -> dict[str, Any]:
        """Return the task as the API shows it (with `result` when stored); raise TaskNotFound."""
        fields, result = self.record(task_id)
        return codec.task_view(fields, result, task_id)

    def record(self, task_id: str) -> tuple[dict[str, str], str | None]:
        """Return the raw task hash and stored result JSON in one round trip; raise TaskNotFound."""
        if not is_task_id(task_id):
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self.keys.task(task_id))
        pipe.get(self.keys.result(task_id))
        fields, result = pipe.execute()
        if not fields:
            raise TaskNotFound(f"task {task_id!r} not found (it may have expired)", task_id=task_id)
        return fields, codec.stored_result(fields, result)

    def list(self, *, queue: str | None = None, status: str | None = None,
             type: str | None = None, cursor: str | None = None, limit: int | None = None,
             periodic_name: str | None = None, id_prefix: str | None = None, created_after: Any = None,
             created_before: Any = None, text: str | None = None) -> Page:
        """Recent tasks of every partition of every queue (or of one queue), newest first,
        filtered; the cursor is opaque (engine/recent.py says what it holds). periodic_name: the
        tasks a periodic schedule fired, which are all in the first partition of their queue
        (engine/periodic.py), so only those partitions are read. A search adds an id prefix (only
        the partitions whose tag it can start), a creation time range and a text in the payload or
        errors (recent.make_search); a filtered page examines at most reads.SCAN_BUDGET ids and
        says when it stopped early (Page.stopped_early)."""
        search = make_search(id_prefix=id_prefix, created_after=created_after, created_before=created_before,
                             text=text)
        limit = page_limit(limit)
        queue, type = queue_filter(queue), type_filter(type)
        if periodic_name and not TASK_TYPE_RE.fullmatch(periodic_name):
            raise ValidationError("periodic_name must be 1-200 characters of letters, digits and _ . : -",
                                  field="periodic_name")
        start = parse_cursor(cursor)
        # Fresh: a queue another process has just created must show (one read of the registry).
        layouts = self.registry.layouts(fresh=True)
        chosen = [layouts[queue]] if queue in layouts else [] if queue else builtins.list(layouts.values())
        tags = sorted({tag for layout in chosen for tag in (layout.tags[:1] if periodic_name else layout.all_tags)})
        if search.id_prefix:
            tag, dash, _ = search.id_prefix.partition("-")
            tags = [t for t in tags if (t == tag if dash else t.startswith(tag))]
        return self.recent.page(tags, queue=queue, status=status, type=type, start=start, limit=limit,
                                periodic_name=periodic_name or None, search=search)

    def cancel(self, task_id: str, actor: Actor) -> CancelResult:
        """Cancel a task, audited: at once when it waits, via the worker when it runs.

        The usual refusals (no such task, already finished, a cancel in flight) are answered
        before the intent is written, so they leave no audit entry; one that races in between
        is recorded as refused.
        """
        status, requested = self.client.hmget(self.keys.task(task_id), "status", "cancel_requested") \
            if is_task_id(task_id) else (None, None)
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

    def run_now(self, task_id: str, actor: Actor) -> str:
        """Make a delayed task or a waiting retry due now: the scheduler leader queues it in its
        next round (DTQ_SCHEDULER_INTERVAL_S). Audited as task.run_now; returns its status
        (PENDING or RETRYING). TaskNotScheduled when it is not waiting in the schedule."""
        if not is_task_id(task_id):
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id)
        with self.audit.operation(actor, "task.run_now", f"task:{task_id}", selected=1,
                                  selection={"task_ids": [task_id]}) as op:
            code, *rest = self.scripts("runTaskNow", keys=[self.keys.partition(tag_of(task_id))],
                                       args=[task_id])
            status = str(rest[0]) if rest else None
            if raise_for_code(code, task_id=task_id, script="runTaskNow", status=status) is ErrorCode.EXISTING:
                raise TaskNotScheduled(f"task {task_id} is {status}, not waiting in the schedule",
                                       task_id=task_id, status=status)
            op.done = 1
        return str(status)

    def delete(self, task_id: str, actor: Actor) -> None:
        """Delete a task: cancelled first when it waits (queued, delayed or a retry; as a cancel,
        so its queue, schedule and workflow move on), then its record, result and listing entry
        removed. A running task is refused (TaskRunning: cancel it, delete it once ended). Audited
        as task.delete."""
        status = self.client.hget(self.keys.task(task_id), "status") if is_task_id(task_id) else None
        if status is None:
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id)
        if status == "RUNNING":
            raise TaskRunning(f"task {task_id} is running: cancel it, and delete it once it has ended",
                              task_id=task_id)
        with self.audit.operation(actor, "task.delete", f"task:{task_id}", selected=1,
                                  selection={"task_ids": [task_id]}) as op:
            if status not in TERMINAL:
                result = self._cancel(task_id)
                if not result.cancelled:  # it started in between: the cancel reaches its worker
                    raise TaskRunning(f"task {task_id} started meanwhile: its cancel is on the way; delete it "
                                      "once it has ended", task_id=task_id)
            code, *rest = self.scripts("deleteTask", keys=[self.keys.partition(tag_of(task_id))], args=[task_id])
            if raise_for_code(code, task_id=task_id, script="deleteTask") is ErrorCode.EXISTING:
                raise TaskRunning(f"task {task_id} is {rest[0] if rest else 'running'}", task_id=task_id)
            op.done = 1

    def _cancel(self, task_id: str) -> CancelResult:
        """Cancel without an audit entry (cancel() records one around this)."""
        if not is_task_id(task_id):
            raise TaskNotFound(f"task {task_id!r} not found", task_id=task_id)
        now = self.clock.now_ms()
        code, *rest = self.scripts("cancelTask", keys=[self.keys.partition(tag_of(task_id))],
                                   args=[task_id, now, iso(now), self.config.retention_arg])
        code = raise_for_code(code, task_id=task_id, script="cancelTask", status=rest[0] if rest else None)
        return CancelResult(id=task_id, status=str(rest[0]), cancelled=code is ErrorCode.OK)


def _queued(s: Submission) -> None:
    hooks.send("task_queued", task_id=s.task_id, type=s.type, queue=s.queue,
               headers=json.loads(s.headers_json) if s.headers_json else {})


def _pairs(flat: list[Any]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _chunks(indexes: builtins.list[int], sizes: builtins.list[int]) -> Iterator[builtins.list[int]]:
    """indexes in runs of at most BULK_CHUNK, each (but a run of one) at most BULK_CHUNK_BYTES of
    payload (sizes: each one's)."""
    run: builtins.list[int] = []
    size = 0
    for i, n in zip(indexes, sizes, strict=True):
        if run and (len(run) == BULK_CHUNK or size + n > BULK_CHUNK_BYTES):
            yield run
            run, size = [], 0
        run.append(i)
        size += n
    if run:
        yield run


def _task_parts(s: Submission, now: int) -> tuple[int, builtins.list[object], str]:
    """A submission's due time (ms, 0 = now), task hash field/value pairs and unique argument, as
    enqueueTask and enqueueTasks take them."""
    due = now + int(s.delay_s * 1000) if s.delay_s > 0 else 0
    if s.unique is not None and s.unique.mode == "debounce":  # a debounced task always waits its window
        due = now + int((s.delay_s + s.unique.window_s) * 1000)
    expires = now + int(s.ttl_s * 1000) if s.ttl_s else ""
    fields: builtins.list[object] = [
        "type", s.type, "queue", s.queue, "priority", s.priority, "payload", s.payload_json,
        "max_attempts", s.max_attempts, "timeout_s", f"{s.timeout_s:g}",
    ]
    # A field at its default is left out: readers take a missing one as empty (a lean
    # record, includes/create_task.lua).
    if expires:
        fields += ["expires_at", expires]
    if s.idempotency_key:
        fields += ["idempotency_key", s.idempotency_key]
    if s.request_id:
        fields += ["request_id", s.request_id]
    if s.handler:
        # A Django task's record keeps its id: the version before the lean record reads a
        # Django result by that field (django_tasks/results.py), and during a rolling deploy
        # its processes read records the new ones write.
        fields += ["handler", s.handler, "id", s.task_id]
    if s.group_key:
        fields += ["group_key", s.group_key]
    if s.unique is not None:
        fields += ["unique_key", s.unique.key, "unique_mode", s.unique.mode]
    if s.headers_json:
        fields += ["headers", s.headers_json]
    return due, fields, "" if s.unique is None else s.unique.arg


def _closed(reply: builtins.list[Any]) -> bool:
    """The enqueue script refused a partition that no longer belongs to the layout it was given."""
    return int(reply[0]) == ErrorCode.PARTITION_CLOSED
