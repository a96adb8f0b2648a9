"""Dead letters: list, search, group, count, and the bulk actions (retry, discard).

Bulk actions snapshot what matched first, write their intent to the audit stream, then act in
pipelined batches, recording progress after each, and write their outcome last.
"""

from __future__ import annotations

import builtins
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..clock import iso
from ..errors import DeadLetterNotFound, ValidationError
from ..keys import Keys
from ..replies import entries
from . import reads
from .audit import Actor, Audit, Operation
from .plumbing import BATCH, Noun, Plumbing
from .reads import Page, page_limit, queue_filter, stream_cursor, stream_fields, type_filter, valid_stream_id
from .tasks import Tasks

PIPELINE_DEPTH = 8  # script calls per round trip in bulk actions
MAX_SELECTION = 1_000_000
MAX_LISTED = 10_000  # ids or task ids in one bulk request


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


@dataclass(frozen=True, kw_only=True, slots=True)
class _Walk:
    matches: list[tuple[str, dict[str, str]]]  # (entry id, fields), newest first
    exhausted: bool  # it passed the oldest entry
    last_seen: str | None  # where to go on from


class DeadLetters(Noun):
    """The dead-letter queue: list, search, group and count entries, and retry or discard them
    in bulk (audited)."""

    def __init__(self, plumbing: Plumbing, audit: Audit, tasks: Tasks) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.tasks = tasks

    def list(self, *, queue: str | None = None, type: str | None = None, q: str | None = None,
             cursor: str | None = None, limit: int | None = None) -> Page:
        """Dead letters newest first, filtered by queue, type and text in error or payload."""
        limit = page_limit(limit)
        queue, type = queue_filter(queue), type_filter(type)
        upper = "+" if not stream_cursor(cursor) else "(" + str(cursor)
        # One match past the page says whether an older page exists, so a full page that ends on
        # the last match offers no cursor to an empty one. Without it (budget spent first), the
        # cursor goes on from the last entry examined.
        walk = self._walk(upper, queue=queue, type=type, q=q, budget=reads.SCAN_BUDGET, limit=limit + 1)
        matches = walk.matches[:limit]
        if len(walk.matches) > limit:
            next_cursor: str | None = matches[-1][0]
        else:
            next_cursor = None if walk.exhausted else walk.last_seen
        return Page(items=[self._item(eid, f) for eid, f in matches], next_cursor=next_cursor)

    def _walk(self, upper: str, *, queue: str | None, type: str | None, q: str | None,
              budget: int, limit: int) -> _Walk:
        """Walk the DLQ down from `upper` until `limit` matches or `budget` entries examined.

        The filters run in Redis (scanDeadLetters), 500 entries a call, so a search that looks at
        thousands of entries ships only the matches. A needle with non-ASCII characters is matched
        here instead (Python's lower(), which Lua's cannot match), on the payloads the script
        returns with the entries that pass the other filters.
        """
        matches: builtins.list[tuple[str, dict[str, str]]] = []
        scanned = 0
        exhausted = False
        last_seen: str | None = None
        needle = q.lower() if q else ""
        in_redis = needle.isascii()
        while len(matches) < limit and scanned < budget and not exhausted:
            count = min(500, budget - scanned)
            examined, last, found, read = self.scripts(
                "scanDeadLetters", keys=[self.keys.dlq(), self.keys.task_prefix()],
                # Matched here, the script's candidates can fall short: it must not stop at `limit`.
                args=[upper, count, queue or "", type or "", needle if in_redis else "", 0 if in_redis else 1,
                      limit - len(matches) if in_redis else count, reads.SCAN_CALL_BYTES])
            scanned += int(examined)
            if last:
                upper, last_seen = "(" + last, last
            for eid, raw, payload in found:
                f = stream_fields(raw)
                if not in_redis and needle not in (f.get("error", "") + " " + f.get("error_class", "")).lower() \
                        and needle not in payload.lower():
                    continue
                matches.append((eid, f))
                if len(matches) == limit:
                    last_seen = eid
                    break
            # It passed the oldest entry (the script stops early once it has as many as asked for).
            exhausted = int(examined) == int(read) < count and len(matches) < limit
        return _Walk(matches=matches, exhausted=exhausted, last_seen=last_seen)

    def get(self, entry_id: str) -> dict[str, Any]:
        if not valid_stream_id(entry_id):  # an unparsable id is a 404, not a 500
            raise DeadLetterNotFound(f"dead letter {entry_id!r} not found", entry_id=entry_id)
        found = entries(self.client.xrange(self.keys.dlq(), entry_id, entry_id))
        if not found:
            raise DeadLetterNotFound(f"dead letter {entry_id!r} not found", entry_id=entry_id)
        item = self._item(found[0][0], stream_fields(found[0][1]))
        try:
            item["task"] = self.tasks.get(item["task_id"])
        except LookupError:
            item["task"] = None
        return item

    def count(self) -> int:
        return int(self.client.xlen(self.keys.dlq()))

    def trimmed(self) -> int:
        """Dead letters the DLQ cap (DTQ_DLQ_MAXLEN) has evicted, ever (dtq_dlq_trimmed_total)."""
        return int(self.client.hget(self.keys.stats_counters(), "dlq_trimmed") or 0)

    @staticmethod
    def _item(eid: str, f: dict[str, str]) -> dict[str, Any]:
        return {"entry_id": eid, "task_id": f.get("task_id"), "queue": f.get("queue"), "type": f.get("type"),
                "attempt": int(f.get("attempt") or 0), "error_class": f.get("error_class"),
                "error": f.get("error"), "failed_at": iso(f.get("failed_at"))}

    def groups(self, *, queue: str | None = None, type: str | None = None,
               window: int = 1000) -> dict[str, Any]:
        """Group the newest `window` dead letters by type, error class and message: one XREVRANGE."""
        window = max(1, min(int(window), reads.SCAN_BUDGET))
        batch = entries(self.client.xrevrange(self.keys.dlq(), "+", "-", count=window))
        groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        for eid, raw in batch:
            f = stream_fields(raw)
            if (queue and f.get("queue") != queue) or (type and f.get("type") != type):
                continue
            # The first line, bounded, so tracebacks and long messages still group together.
            message = (f.get("error") or "").strip().splitlines()[0][:200] if f.get("error") else ""
            key = (f.get("type") or "", f.get("error_class") or "", message)
            group = groups.get(key)
            if group is None:
                group = groups[key] = {"type": key[0], "error_class": key[1], "message": message, "count": 0,
                                       "queues": set(), "latest_entry_id": eid,
                                       "latest_failed_at": iso(f.get("failed_at"))}
            group["count"] += 1
            group["queues"].add(f.get("queue") or "")
        items = sorted(groups.values(), key=lambda g: (-g["count"], g["type"], g["message"]))
        for group in items:
            group["queues"] = sorted(group["queues"])
        return {"groups": items, "scanned": len(batch), "window": window, "partial": len(batch) == window}

    def match_count(self, *, queue: str | None = None, type: str | None = None,
                    q: str | None = None, budget: int = reads.SCAN_BUDGET) -> dict[str, Any]:
        """How many dead letters a filter matches (the preview before a bulk action), in bounded time.

        Queue-only and unfiltered counts are exact from the counts hash. Type and text filters count
        within the newest `budget` entries; `exact` is False when older entries were not examined
        (the action itself still matches every entry).
        """
        queue, type = queue_filter(queue), type_filter(type)
        if not (type or q):
            if queue:
                return {"count": max(0, int(self.client.hget(self.keys.dlq_counts(), queue) or 0)), "exact": True}
            return {"count": self.count(), "exact": True}
        walk = self._walk("+", queue=queue, type=type, q=q, budget=budget, limit=budget)
        more = not walk.exhausted and bool(self.client.xrevrange(
            self.keys.dlq(), "(" + walk.last_seen if walk.last_seen else "+", "-", count=1))
        count = len(walk.matches)
        return {"count": count, "exact": not more}

    def select(self, selection: DlqSelection) -> builtins.list[str]:
        """Snapshot the DLQ entry ids a selection matches right now (newest first)."""
        selection.check()
        if selection.ids:
            return list(dict.fromkeys(selection.ids))
        if selection.task_ids:
            pipe = self.client.pipeline(transaction=False)
            for task_id in selection.task_ids:
                pipe.hget(self.keys.task(task_id), "dlq_entry_id")
            return [eid for eid in dict.fromkeys(pipe.execute()) if eid]
        ids: builtins.list[str] = []
        cursor: str | None = None
        while len(ids) < MAX_SELECTION:
            page = self.list(queue=selection.queue, type=selection.type, q=selection.q, cursor=cursor,
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
        for entry_id in ids:
            pipe.xrange(self.keys.dlq(), entry_id, entry_id)
        return sum(1 for rows in pipe.execute() if rows)

    def _in_batches(self, script: str, keys: builtins.list[str], fixed: builtins.list[object], ids: builtins.list[str],
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

    def retry(self, selection: DlqSelection, actor: Actor) -> int:
        """Requeue the matching dead letters with a fresh attempt budget; return how many."""
        ids = self.select(selection)
        k = self.keys
        with self.audit.operation(actor, "dlq.retry", selection.describe(), selected=len(ids),
                                  selection=selection.audited()) as op:
            now = self.clock.now_ms()
            self._in_batches("retryDeadLetters", [k.dlq(), k.events(), k.event_seq(), k.queues(), k.ready(),
                                                  k.wake_any(), k.task_prefix(), k.stream_prefix(), k.wake_prefix()],
                             [now, iso(now), self.config.task_retention_s * 1000, Keys.GROUP], ids, op,
                             lambda r: int(r[0]))
        return op.done

    def discard(self, selection: DlqSelection, actor: Actor) -> int:
        """Drop the matching dead letters; return how many."""
        ids = self.select(selection)
        k = self.keys
        with self.audit.operation(actor, "dlq.discard", selection.describe(), selected=len(ids),
                                  selection=selection.audited()) as op:
            now = self.clock.now_ms()
            self._in_batches("discardDeadLetters", [k.dlq(), k.events(), k.event_seq(), k.task_prefix()],
                             [now, iso(now), self.config.task_retention_s * 1000], ids, op, int)
        return op.done
