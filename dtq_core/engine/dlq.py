"""Dead letters: list, search, group, count, and the bulk actions (retry, discard).

Each queue partition has its own DLQ stream; this noun shows them as one DLQ (dlq_walk.py merges
them newest first). A dead letter's id is keys.dlq_ref(tag, entry id), so an id alone finds its
partition.

Bulk actions snapshot what matched first, write their intent to the audit stream, then act with
one script call per partition and batch of ids, pipelined, recording progress after each round
trip, and write their outcome last.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..clock import iso
from ..errors import DeadLetterNotFound, DtqError, ErrorCode
from ..keys import Keys, dlq_ref, is_task_id, tag_of
from ..replies import entries
from ..task import valid_queue_name
from . import reads
from .audit import Actor, Audit, Operation
from .dlq_selection import DlqSelection
from .dlq_walk import Filters, Position, Walker, group_key, parse_cursor
from .plumbing import BATCH, Noun, Plumbing
from .reads import Page, page_limit, queue_filter, stream_fields, type_filter
from .registry import Registry
from .tasks import Tasks

__all__ = ["DeadLetters", "DlqSelection", "RetryOutcome"]

PIPELINE_DEPTH = 8  # script calls per round trip in bulk actions
MAX_SELECTION = 1_000_000

Call = tuple[str, builtins.list[str]]  # (partition tag, entry ids): one script call


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryOutcome:
    """What a DLQ retry did with the dead letters it selected (retryDeadLetters' counts)."""

    retried: int
    not_found: int  # gone already (retried or discarded by someone else, trimmed), or stale
    kept: int  # left in the DLQ: its task record expired (or cannot be read), so only discard helps


class DeadLetters(Noun):
    """The dead-letter queue: list, search, group and count entries, and retry or discard them
    in bulk (audited)."""

    def __init__(self, plumbing: Plumbing, audit: Audit, tasks: Tasks, registry: Registry) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.tasks = tasks
        self.registry = registry

    # -- reading ----------------------------------------------------------------------------------
    def _tags(self, queue: str | None = None) -> builtins.list[str]:
        """The partitions to read: the queue's, or every registered queue's (serving and draining).
        Read fresh: a listing must not miss a queue another process registered a moment ago."""
        layouts = self.registry.layouts(fresh=True)
        if queue is not None:
            layout = layouts.get(queue)
            return list(layout.all_tags) if layout else []
        return sorted({tag for layout in layouts.values() for tag in layout.all_tags})

    def _walker(self, *, queue: str | None, type: str | None = None, q: str | None = None,
                error_class: str | None = None, message: str | None = None,
                below: Position | None = None) -> Walker:
        return Walker(keys=self.keys, scripts=self.scripts, client=self.client, tags=self._tags(queue),
                      below=below, filters=Filters(queue=queue, type=type, q=q, error_class=error_class,
                                                   message=message))

    def list(self, *, queue: str | None = None, type: str | None = None, q: str | None = None,
             error_class: str | None = None, message: str | None = None,
             cursor: str | None = None, limit: int | None = None) -> Page:
        """Dead letters newest first, filtered by queue, type, text in error or payload, and error
        group (error_class and message exactly, as groups() gives them; None: any)."""
        limit = page_limit(limit)
        queue, type = queue_filter(queue), type_filter(type)
        below = parse_cursor(cursor)
        # One match past the page says whether an older page exists, so a full page that ends on
        # the last match offers no cursor to an empty one. Without it (budget spent first), the
        # cursor goes on from where every partition has been read down to.
        walk = self._walker(queue=queue, type=type, q=q, error_class=error_class, message=message,
                            below=below).walk(limit=limit + 1, budget=reads.SCAN_BUDGET)
        matches = walk.matches[:limit]
        if len(walk.matches) > limit:
            next_cursor: str | None = matches[-1][0].ref
        else:
            next_cursor = None if walk.frontier is None else walk.frontier.ref
        return Page(items=[self._item(pos, f) for pos, f in matches], next_cursor=next_cursor)

    def get(self, entry_id: str) -> dict[str, Any]:
        """One dead letter by its id (keys.dlq_ref), with its task (None when the task expired)."""
        position = Position.from_ref(entry_id)
        if position is None:  # not an id dtq gives: a 404, not a 500
            raise DeadLetterNotFound(f"dead letter {entry_id!r} not found", entry_id=entry_id)
        found = entries(self.client.xrange(self.keys.dlq(position.tag), position.entry_id, position.entry_id))
        if not found:
            raise DeadLetterNotFound(f"dead letter {entry_id!r} not found", entry_id=entry_id)
        item = self._item(position, stream_fields(found[0][1]))
        try:
            item["task"] = self.tasks.get(item["task_id"]) if is_task_id(item["task_id"]) else None
        except LookupError:
            item["task"] = None
        return item

    def _sum(self, read: Callable[[Any, str], object], tags: Iterable[str]) -> int:
        """Add up one integer reply per partition, read in one pipeline."""
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            read(pipe, tag)
        return sum(int(value or 0) for value in pipe.execute())

    def count(self) -> int:
        """Dead letters in every partition's DLQ."""
        return self._sum(lambda pipe, tag: pipe.xlen(self.keys.dlq(tag)), self._tags())

    def trimmed(self) -> int:
        """Dead letters the DLQ cap (DTQ_DLQ_MAXLEN, per partition) has evicted, ever
        (dtq_dlq_trimmed_total)."""
        return self._sum(lambda pipe, tag: pipe.hget(self.keys.stats_counters(tag), "dlq_trimmed"), self._tags())

    @staticmethod
    def _item(position: Position, f: dict[str, str]) -> dict[str, Any]:
        # attempt and failed_at hold their place in the field order; _typed_fields reads them.
        item = {"entry_id": position.ref, "task_id": f.get("task_id"), "queue": f.get("queue"),
                "type": f.get("type"), "attempt": None, "error_class": f.get("error_class"),
                "error": f.get("error"), "failed_at": None}
        item.update(_typed_fields(f))
        return item

    def groups(self, *, queue: str | None = None, type: str | None = None,
               window: int = 1000) -> dict[str, Any]:
        """Group the newest `window` dead letters by type, error class and message."""
        window = max(1, min(int(window), reads.SCAN_BUDGET))
        queue, type = queue_filter(queue), type_filter(type)
        walk = self._walker(queue=queue).walk(limit=window, budget=2 * window)
        batch = walk.matches[:window]
        groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        for position, f in batch:
            if type and f.get("type") != type:
                continue
            key = group_key(f)  # what list(type=, error_class=, message=) selects again
            group = groups.get(key)
            if group is None:
                group = groups[key] = {"type": key[0], "error_class": key[1], "message": key[2], "count": 0,
                                       "queues": set(), "latest_entry_id": position.ref,
                                       "latest_failed_at": _typed_fields(f)["failed_at"]}
            group["count"] += 1
            group["queues"].add(f.get("queue") or "")
        items = sorted(groups.values(), key=lambda g: (-g["count"], g["type"], g["message"]))
        for group in items:
            group["queues"] = sorted(group["queues"])
        return {"groups": items, "scanned": len(batch), "window": window,
                "partial": len(batch) == window or walk.frontier is not None}

    def match_count(self, *, queue: str | None = None, type: str | None = None, q: str | None = None,
                    error_class: str | None = None, message: str | None = None,
                    budget: int = reads.SCAN_BUDGET) -> dict[str, Any]:
        """How many dead letters a filter matches (the preview before a bulk action), in bounded time.

        Queue-only and unfiltered counts are exact from the counts. Type, text and group filters
        count within the newest `budget` entries (shared among the partitions read); `exact` is False
        when older entries were not examined (the action itself still matches every entry).
        """
        queue, type = queue_filter(queue), type_filter(type)
        filters = Filters(queue=queue, type=type, q=q, error_class=error_class, message=message)
        if not filters.narrows:
            if queue:
                count = self._sum(lambda pipe, tag: pipe.hget(self.keys.dlq_counts(tag), queue), self._tags(queue))
                return {"count": max(0, count), "exact": True}
            return {"count": self.count(), "exact": True}
        walk = self._walker(queue=queue, type=type, q=q, error_class=error_class,
                            message=message).walk(limit=budget, budget=budget)
        more = False
        if walk.lanes_left:  # read to their last entry, without a read past it to say so
            pipe = self.client.pipeline(transaction=False)
            for tag, bound in walk.lanes_left:
                pipe.xrevrange(self.keys.dlq(tag), bound, "-", count=1)
            more = any(pipe.execute())
        return {"count": len(walk.matches) + walk.unsettled, "exact": not more}

    def select(self, selection: DlqSelection) -> builtins.list[str]:
        """Snapshot the ids of the dead letters a selection matches right now (newest first)."""
        selection.check()
        if selection.ids:
            return list(dict.fromkeys(selection.ids))
        if selection.task_ids:
            task_ids = [t for t in dict.fromkeys(selection.task_ids) if is_task_id(t)]  # others name no task
            pipe = self.client.pipeline(transaction=False)
            for task_id in task_ids:
                pipe.hget(self.keys.task(task_id), "dlq_entry_id")
            found = pipe.execute()
            return [dlq_ref(tag_of(t), eid) for t, eid in zip(task_ids, found, strict=True) if eid]
        ids: builtins.list[str] = []
        cursor: str | None = None
        while len(ids) < MAX_SELECTION:
            page = self.list(queue=selection.queue, type=selection.type, q=selection.q,
                             error_class=selection.error_class, message=selection.message, cursor=cursor,
                             limit=500)
            ids.extend(item["entry_id"] for item in page.items)
            if not page.next_cursor:
                break
            cursor = page.next_cursor
        return ids

    def count_selected(self, selection: DlqSelection) -> int:
        """Count the entries a bulk action would touch now (a dry run: nothing changes)."""
        ids = self.select(selection)
        if not selection.ids:
            return len(ids)
        pipe = self.client.pipeline(transaction=False)
        for ref in ids:
            position = Position.from_ref(ref)
            assert position is not None  # checked by select
            pipe.xrange(self.keys.dlq(position.tag), position.entry_id, position.entry_id)
        return sum(1 for rows in pipe.execute() if rows)

    # -- acting ------------------------------------------------------------------------------------
    def _run(self, script: str, calls: builtins.list[Call], args_of: Callable[[str], builtins.list[object]],
             op: Operation, changed: Callable[[Call, Any], int]) -> None:
        """Run `script` once per call (a partition and at most BATCH of its entry ids),
        PIPELINE_DEPTH calls per round trip, adding what each reply changed to the operation's
        progress after every round trip.

        Each call is atomic but short, so other clients are never blocked for long; pipelining
        keeps a 10,000-entry action to a few round trips. A process killed between two round
        trips leaves every entry either done or untouched, and the progress recorded last.
        """
        for first in range(0, len(calls), PIPELINE_DEPTH):
            sent = calls[first:first + PIPELINE_DEPTH]
            pipe = self.client.pipeline(transaction=False)
            for tag, chunk in sent:
                self.scripts(script, keys=[self.keys.partition(tag)], args=[*args_of(tag), *chunk], client=pipe)
            op.advance(sum(changed(call, reply) for call, reply in zip(sent, self.scripts.execute(pipe), strict=True)))

    def retry(self, selection: DlqSelection, actor: Actor) -> int:
        """Requeue the matching dead letters with a fresh attempt budget; return how many."""
        return self.retry_outcome(selection, actor).retried

    def retry_outcome(self, selection: DlqSelection, actor: Actor) -> RetryOutcome:
        """Requeue the matching dead letters with a fresh attempt budget; say how many were
        retried, how many were not found and how many stay (their task record expired).

        A partition whose queue was deleted since (its owner no longer matches the registry) is
        refused by the script whole; the queue is then registered again (registry.ensure, within
        DTQ_MAX_QUEUES) and the partition's dead letters retried once more, when the queue's new
        layout still has that partition. Those of a partition it no longer has stay in the DLQ.
        """
        ids = self.select(selection)
        with self.audit.operation(actor, "dlq.retry", selection.describe(), selected=len(ids),
                                  selection=selection.audited()) as op:
            now = self.clock.now_ms()
            fixed: builtins.list[object] = [Keys.GROUP, now, iso(now), self.config.task_retention_s * 1000]
            layouts = self.registry.layouts(fresh=True)
            layout_of = {tag: layout for layout in layouts.values() for tag in layout.all_tags}
            closed: dict[str, builtins.list[Call]] = {}
            skipped = {"not_found": 0, "kept": 0}

            def args_of(tag: str) -> builtins.list[object]:
                layout = layout_of.get(tag)
                return [layout.owner, layout.queue, *fixed] if layout else ["", "", *fixed]

            def changed(call: Call, reply: Any) -> int:
                if int(reply[0]) == ErrorCode.PARTITION_CLOSED:
                    if reply[1]:
                        closed.setdefault(str(reply[1]), []).append(call)
                    else:  # none of its entries is left (or the partition never was): not found
                        skipped["not_found"] += len(call[1])
                    return 0
                return _retried(reply, skipped)

            self._run("retryDeadLetters", _calls(ids), args_of, op, changed)
            self._retry_reopened(closed, fixed, op, skipped)
        return RetryOutcome(retried=op.done, **skipped)

    def _retry_reopened(self, closed: dict[str, builtins.list[Call]], fixed: builtins.list[object],
                        op: Operation, skipped: dict[str, int]) -> None:
        """Register each refused partition's queue again and retry its calls once with the new
        layout; raise the first error doing so (QUEUE_LIMIT_REACHED) once the rest are done."""
        if not closed:
            return
        self.registry.forget_cache()
        failure: DtqError | None = None
        for queue, calls in closed.items():
            if not valid_queue_name(queue):  # a dead letter edited by hand: it stays
                continue
            try:
                layout = self.registry.ensure(queue)
            except DtqError as exc:
                failure = failure or exc
                continue
            again = [call for call in calls if call[0] in layout.all_tags]
            self._run("retryDeadLetters", again, _same([layout.owner, layout.queue, *fixed]), op,
                      lambda _call, reply: _retried(reply, skipped) if int(reply[0]) == ErrorCode.OK else 0)
        if failure is not None:
            raise failure

    def discard(self, selection: DlqSelection, actor: Actor) -> int:
        """Drop the matching dead letters; return how many."""
        ids = self.select(selection)
        with self.audit.operation(actor, "dlq.discard", selection.describe(), selected=len(ids),
                                  selection=selection.audited()) as op:
            now = self.clock.now_ms()
            fixed: builtins.list[object] = [now, iso(now), self.config.task_retention_s * 1000]
            self._run("discardDeadLetters", _calls(ids), _same(fixed), op, lambda _call, reply: int(reply))
        return op.done


# The typed fields of a dead letter, each with how its stored text reads (a missing attempt is 0).
_TYPED: tuple[tuple[str, Callable[[str | None], object]], ...] = (
    ("attempt", lambda raw: int(raw or 0)), ("failed_at", iso))


def _typed_fields(f: dict[str, str]) -> dict[str, Any]:
    """A dead letter's attempt and failed_at as the API shows them. One that does not read (edited
    by hand, or written by a bug) is shown as null, its stored text kept as `<name>_corrupt` (as a
    quarantined task record keeps `attempt_corrupt`) and the entry marked "damaged": true, so one
    damaged dead letter is listed (and can be discarded) instead of failing the whole DLQ."""
    out: dict[str, Any] = {}
    for name, read in _TYPED:
        raw = f.get(name)
        try:
            out[name] = read(raw)
        except (ValueError, OverflowError, OSError):  # not a number, or a time out of range
            out.update({name: None, f"{name}_corrupt": raw, "damaged": True})
    return out


def _retried(reply: Any, skipped: dict[str, int]) -> int:
    """How many a retryDeadLetters reply {OK, retried, gone, kept} retried; add the entries it
    skipped (gone) and kept to `skipped`, for the caller to name what was not retried."""
    skipped["not_found"] += int(reply[2])
    skipped["kept"] += int(reply[3])
    return int(reply[1])


def _calls(ids: Iterable[str]) -> builtins.list[Call]:
    """Group dead-letter ids by partition, in calls of at most BATCH entry ids."""
    by_tag: dict[str, builtins.list[str]] = {}
    for ref in ids:
        position = Position.from_ref(ref)
        if position is not None:  # DlqSelection.check refused the others
            by_tag.setdefault(position.tag, []).append(position.entry_id)
    return [(tag, entry_ids[start:start + BATCH]) for tag, entry_ids in by_tag.items()
            for start in range(0, len(entry_ids), BATCH)]


def _same(args: builtins.list[object]) -> Callable[[str], builtins.list[object]]:
    """The same script arguments for every partition."""
    return lambda _tag: args
