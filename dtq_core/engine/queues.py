"""Queues: their counts, what waits in one, and the operator actions (pause, resume, purge,
delete), each audited."""

from __future__ import annotations

import json
from typing import Any

from ..clock import iso
from ..errors import QueueNotFound, ValidationError, raise_for_code
from ..keys import PRIORITIES, Keys
from ..replies import entries, text_set
from ..task import valid_queue_name
from .audit import Actor, Audit
from .plumbing import BATCH, Noun, Plumbing
from .reads import MAX_ID_PART, Page, id_parts, page_limit, stream_fields, valid_stream_id


def _pause_details(raw: str | None) -> dict[str, Any]:
    """Who paused a paused queue, and when (None for a pause from before dtq recorded it)."""
    try:
        info = json.loads(raw) if raw else {}
        return {"paused_by": str(info["by"]), "paused_at": iso(int(info["at"]))}
    except (ValueError, KeyError, TypeError):
        return {"paused_by": None, "paused_at": None}


class Queues(Noun):
    """List queues with their counts, page through one, and the operator actions on them."""

    def __init__(self, plumbing: Plumbing, audit: Audit) -> None:
        super().__init__(plumbing)
        self.audit = audit

    def names(self) -> list[str]:
        return sorted(text_set(self.client.smembers(self.keys.queues())))

    def stats(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Depth per priority, in flight, retry scheduled, DLQ count, paused: one round trip."""
        k = self.keys
        if names is None:
            names = self.names()
        pipe = self.client.pipeline(transaction=False)
        pipe.smembers(k.paused())
        pipe.hgetall(k.schedule_counts())
        pipe.hgetall(k.dlq_counts())
        pipe.hgetall(k.throughput(self.clock.now_ms() // 60000 - 1))
        pipe.hgetall(k.paused_info())
        for name in names:
            for stream in k.streams(name):
                pipe.xlen(stream)
                pipe.xpending(stream, Keys.GROUP)
        replies = pipe.execute(raise_on_error=False)
        paused, scheduled, dead, done_last_minute, paused_info = replies[:5]
        out = []
        for i, name in enumerate(names):
            depth: dict[str, int] = {}
            in_flight = 0
            for j, priority in enumerate(PRIORITIES):
                base = 5 + i * 6 + j * 2
                length = replies[base] if isinstance(replies[base], int) else 0
                pending = replies[base + 1]
                pending_count = int(pending["pending"]) if isinstance(pending, dict) else 0
                in_flight += pending_count
                depth[priority] = max(0, length - pending_count)
            out.append({
                "name": name,
                "depth": depth,
                "waiting": sum(depth.values()),
                "pending": in_flight,
                "retry_scheduled": max(0, int(scheduled.get(name, 0))),
                "dlq": max(0, int(dead.get(name, 0))),
                "paused": name in paused,
                **_pause_details(paused_info.get(name) if name in paused else None),
                "finished_last_minute": int(done_last_minute.get(name, 0)),
            })
        return out

    def get(self, name: str) -> dict[str, Any]:
        if not valid_queue_name(name) or not self.client.sismember(self.keys.queues(), name):
            raise QueueNotFound(f"queue {name!r} not found", queue=name)
        return self.stats([name])[0]

    def waiting(self, name: str, *, after: str | None = None, limit: int | None = None
                      ) -> Page:
        """Entries of a queue's streams in serving order (high first), paged by stream id.

        The cursor is "<priority>:<entry id>"; entries in flight are included, with their status.
        """
        limit = page_limit(limit)
        self.get(name)
        start_priority, start_id = "high", "-"
        if after:
            start_priority, _, start_id = after.partition(":")
            # "(" + the largest id would make XRANGE fail; no page ever ends there.
            if start_priority not in PRIORITIES or not valid_stream_id(start_id) \
                    or id_parts(start_id) == (MAX_ID_PART, MAX_ID_PART):
                raise ValidationError("invalid cursor", field="cursor")
            start_id = "(" + start_id
        rows: list[tuple[str, str, str]] = []
        for priority in PRIORITIES[PRIORITIES.index(start_priority):]:
            want = limit + 1 - len(rows)
            if want <= 0:
                break
            found = entries(self.client.xrange(self.keys.stream(name, priority), start_id, "+", count=want))
            rows.extend((priority, eid, stream_fields(f).get("task_id", "")) for eid, f in found)
            start_id = "-"
        more = len(rows) > limit
        rows = rows[:limit]
        pipe = self.client.pipeline(transaction=False)
        for _, _, task_id in rows:
            pipe.hmget(self.keys.task(task_id), "type", "status", "attempt", "created_at", "payload")
        items = []
        for (priority, eid, task_id), (ttype, status, attempt, created, payload) in zip(rows, pipe.execute(),
                                                                                          strict=True):
            items.append({"entry_id": eid, "priority": priority, "task_id": task_id, "type": ttype,
                          "status": status or "MISSING", "attempt": int(attempt or 0),
                          "created_at": iso(created), "payload_preview": (payload or "")[:200]})
        next_cursor = f"{rows[-1][0]}:{rows[-1][1]}" if more and rows else None
        return Page(items=items, next_cursor=next_cursor)

    def pause(self, queue: str, actor: Actor) -> bool:
        """Pause a queue; return True when its state changed. Audited either way."""
        return self._set_paused(queue, True, actor)

    def resume(self, queue: str, actor: Actor) -> bool:
        """Resume a queue; return True when its state changed. Audited either way."""
        return self._set_paused(queue, False, actor)

    def _set_paused(self, queue: str, paused: bool, actor: Actor) -> bool:
        k = self.keys
        if not valid_queue_name(queue) or not self.client.sismember(k.queues(), queue):
            raise QueueNotFound(f"queue {queue!r} not found", queue=queue)  # before any audit entry
        with self.audit.operation(actor, "queue.pause" if paused else "queue.resume", f"queue:{queue}", selected=1,
                                  selection={"queue": queue}) as op:
            now = self.clock.now_ms()
            changed = int(self.scripts("setPaused", keys=[k.paused(), k.events(), k.event_seq(), k.queues(),
                                                          k.paused_info(), k.ready(), k.wake_any(), k.wake(queue)],
                                       args=[queue, 1 if paused else 0, now, iso(now), actor.name]))
            if changed < 0:
                raise_for_code(changed, task_id=None, script="setPaused", queue=queue)
            op.done = changed
        return bool(changed)

    def purge(self, queue: str, actor: Actor) -> int:
        """Cancel every task waiting in the queue when the purge starts; return how many."""
        self.get(queue)
        k = self.keys
        now = self.clock.now_ms()
        pipe = self.client.pipeline(transaction=False)
        for priority in PRIORITIES:
            pipe.xrevrange(k.stream(queue, priority), "+", "-", count=1)
        snapshots = [rows[0][0] if rows else None for rows in pipe.execute()]
        with self.audit.operation(actor, "queue.purge", f"queue:{queue}", selection={"queue": queue}) as op:
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

    def delete(self, queue: str, actor: Actor) -> None:
        """Delete an empty queue (nothing waiting, in flight or scheduled); raise QueueNotEmpty or
        QueueNotFound. Audited when it happened (a refusal withdraws its intent: nothing changed)."""
        k = self.keys
        if not valid_queue_name(queue) or not self.client.sismember(k.queues(), queue):
            raise QueueNotFound(f"queue {queue!r} not found", queue=queue)  # before any audit entry
        with self.audit.operation(actor, "queue.delete", f"queue:{queue}", selected=1,
                                  selection={"queue": queue}) as op:
            now = self.clock.now_ms()
            code, *counts = self.scripts(
                "deleteQueue", keys=[k.queues(), k.paused(), k.paused_info(), k.ready(), *k.streams(queue),
                                     k.wake(queue), k.schedule_counts(), k.running(), k.events(), k.event_seq(),
                                     k.task_prefix(), k.schedule_claims()],
                args=[queue, Keys.GROUP, now, iso(now)])
            waiting, in_flight, scheduled = (int(c) for c in counts) if counts else (0, 0, 0)
            raise_for_code(code, task_id=None, script="deleteQueue", queue=queue, waiting=waiting,
                           in_flight=in_flight, scheduled=scheduled)
            op.done = 1

    def _publish_admin_event(self, etype: str, queue: str | None, now: int) -> None:
        seq = self.client.incr(self.keys.event_seq())
        self.client.publish(self.keys.events(), json.dumps(
            {"event_id": f"{now}-{seq}", "type": etype, "task_id": None, "queue": queue, "status": None,
             "attempt": 0, "ts": iso(now)}))
