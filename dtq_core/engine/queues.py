"""Queues: their counts, what waits in one, and the operator actions (pause, resume, purge,
delete), each audited.

A queue is the partitions the registry lists for it (engine/registry.py): counts are summed over
them, and an action is one script call per partition, pipelined. Read from the registry afresh,
not from the submitters' cache, so an operator never acts on a layout seconds old.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from ..clock import iso
from ..errors import ErrorCode, PartitionClosed, QueueNotEmpty, QueueNotFound, ValidationError, raise_for_code
from ..keys import PRIORITIES, TAG_RE, Keys, is_task_id
from ..partitions import Layout
from ..replies import entries, text_hash
from ..task import valid_queue_name
from .audit import Actor, Audit
from .plumbing import BATCH, Noun, Plumbing
from .reads import MAX_ID_PART, Page, id_parts, page_limit, stream_fields, valid_stream_id
from .registry import Registry

# The replies of one partition in the stats pipeline: XLEN and XPENDING per priority, then these.
_PER_PARTITION = 2 * len(PRIORITIES) + 4


def _pause_details(raw: str | None) -> dict[str, Any]:
    """Who paused a paused queue, and when (None for a pause whose record does not parse)."""
    try:
        info = json.loads(raw) if raw else {}
        return {"paused_by": str(info["by"]), "paused_at": iso(int(info["at"]))}
    except (ValueError, KeyError, TypeError):
        return {"paused_by": None, "paused_at": None}


def _count(reply: Any) -> int:
    """A count from a pipeline reply: a missing key (None) or an error (a stream with no group
    yet, a key of another type) is 0."""
    if isinstance(reply, dict):  # XPENDING's summary
        return int(reply.get("pending") or 0)
    try:
        return max(0, int(reply))
    except (TypeError, ValueError):
        return 0


def _code(reply: Any) -> int:
    """The code a partition script replied first ({code, ...} or a bare code)."""
    return int(reply[0]) if isinstance(reply, list) else int(reply)


class Queues(Noun):
    """List queues with their counts, page through one, and the operator actions on them."""

    def __init__(self, plumbing: Plumbing, audit: Audit, registry: Registry) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.registry = registry

    def names(self) -> list[str]:
        return sorted(self.registry.layouts(fresh=True))

    def layout(self, name: str) -> Layout:
        """The queue's layout, read afresh; QueueNotFound when it is not registered."""
        layout = self.registry.get(name, fresh=True) if valid_queue_name(name) else None
        if layout is None:
            raise QueueNotFound(f"queue {name!r} not found", queue=name)
        return layout

    # -- reads ------------------------------------------------------------------------------------
    def stats(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Depth per priority, in flight, retry scheduled, DLQ count, paused, finished last minute,
        summed over each queue's partitions: the registry, then one pipelined round trip."""
        layouts = self.registry.layouts(fresh=True)
        if names is None:
            names = sorted(layouts)
        # A queue not registered (yet, or any more) holds nothing: a row of zeros.
        return self._stats([layouts.get(name) or Layout(queue=name, tags=()) for name in names])

    def get(self, name: str) -> dict[str, Any]:
        return self._stats([self.layout(name)])[0]

    def _stats(self, layouts: list[Layout]) -> list[dict[str, Any]]:
        k = self.keys
        now_ms = self.clock.now_ms()
        minute = now_ms // 60000
        # The last 60 s, not the last full minute (which stood still for a minute, and showed 2
        # during a burst of 80): this minute's count plus the part of the previous minute's that
        # falls within the window, prorated as a sliding-window rate limiter does.
        previous_share = 1 - (now_ms % 60000) / 60000
        pipe = self.client.pipeline(transaction=False)
        for layout in layouts:
            for tag in layout.all_tags:
                for stream in k.streams(tag, layout.queue):
                    pipe.xlen(stream)
                    pipe.xpending(stream, Keys.GROUP)
                pipe.zcard(k.schedule(tag))
                pipe.xlen(k.dlq(tag))
                pipe.get(k.paused(tag))
                pipe.hget(k.throughput(tag, minute - 1), layout.queue)
                pipe.hget(k.throughput(tag, minute), layout.queue)
        replies = iter(pipe.execute(raise_on_error=False))
        out = []
        for layout in layouts:
            depth = dict.fromkeys(PRIORITIES, 0)
            in_flight = scheduled = dead = 0
            finished = 0.0
            pauses: list[str] = []
            for _ in layout.all_tags:
                for priority in PRIORITIES:
                    length, pending = _count(next(replies)), _count(next(replies))
                    in_flight += pending
                    # Entries stay in the stream until acknowledged: waiting = length - in flight.
                    depth[priority] += max(0, length - pending)
                scheduled += _count(next(replies))
                dead += _count(next(replies))
                flag = next(replies)
                if isinstance(flag, str):
                    pauses.append(flag)
                finished += _count(next(replies)) * previous_share + _count(next(replies))
            out.append({
                "name": layout.queue,
                "depth": depth,
                "waiting": sum(depth.values()),
                "pending": in_flight,
                "retry_scheduled": scheduled,
                "dlq": dead,
                # Paused when any partition is: a pause cut short is finished by pausing again.
                "paused": bool(pauses),
                **_pause_details(pauses[0] if pauses else None),
                "finished_last_minute": round(finished),
                "partitions": len(layout.all_tags),
            })
        return out

    def waiting(self, name: str, *, after: str | None = None, limit: int | None = None) -> Page:
        """Entries of a queue's streams in serving order (high first), paged by stream id.

        Within a priority the partitions' entries are merged by (entry id, partition tag); the
        cursor is "<priority>:<entry id>:<tag>" of the last entry shown. Entries in flight are
        included, with their status. One pipelined read of every partition and priority, then one
        for the tasks shown.
        """
        limit = page_limit(limit)
        layout = self.layout(name)
        start = (0, (0, 0), "")
        if after:
            priority, _, rest = after.partition(":")
            entry_id, _, tag = rest.partition(":")
            # No page ends at the largest id ("(" of it would make XRANGE fail).
            if priority not in PRIORITIES or not valid_stream_id(entry_id) or (tag and not TAG_RE.fullmatch(tag)) \
                    or id_parts(entry_id) == (MAX_ID_PART, MAX_ID_PART):
                raise ValidationError("invalid cursor", field="cursor")
            start = (PRIORITIES.index(priority), id_parts(entry_id), tag)
        pipe = self.client.pipeline(transaction=False)
        reads: list[tuple[int, str]] = []
        for rank in range(start[0], len(PRIORITIES)):
            for tag in layout.all_tags:
                low = "-"
                if rank == start[0] and after:
                    entry_id = "-".join(map(str, start[1]))
                    # The cursor's entry was shown: a partition whose tag sorts after its tag
                    # still has that id to show, the others only what follows it.
                    low = entry_id if tag > start[2] and start[2] else "(" + entry_id
                reads.append((rank, tag))
                pipe.xrange(self.keys.stream(tag, name, PRIORITIES[rank]), low, "+", count=limit + 1)
        rows: list[tuple[int, tuple[int, int], str, str, str]] = []
        for (rank, tag), found in zip(reads, pipe.execute(), strict=True):
            rows.extend((rank, id_parts(eid), tag, eid, stream_fields(f).get("task_id", ""))
                        for eid, f in entries(found))
        rows.sort(key=lambda row: row[:3])
        more = len(rows) > limit
        rows = rows[:limit]
        pipe = self.client.pipeline(transaction=False)
        for *_, task_id in rows:
            if is_task_id(task_id):
                pipe.hmget(self.keys.task(task_id), "type", "status", "attempt", "created_at", "payload")
        records = iter(pipe.execute())
        items = []
        for rank, _, _, eid, task_id in rows:
            ttype, status, attempt, created, payload = next(records) if is_task_id(task_id) else [None] * 5
            items.append({"entry_id": eid, "priority": PRIORITIES[rank], "task_id": task_id, "type": ttype,
                          "status": status or "MISSING", "attempt": int(attempt or 0),
                          "created_at": iso(created), "payload_preview": (payload or "")[:200]})
        last = rows[-1] if rows else None
        next_cursor = f"{PRIORITIES[last[0]]}:{last[3]}:{last[2]}" if more and last else None
        return Page(items=items, next_cursor=next_cursor)

    # -- actions ----------------------------------------------------------------------------------
    def pause(self, queue: str, actor: Actor) -> bool:
        """Pause a queue; return True when its state changed. Audited either way."""
        return self._set_paused(queue, True, actor)

    def resume(self, queue: str, actor: Actor) -> bool:
        """Resume a queue; return True when its state changed. Audited either way."""
        return self._set_paused(queue, False, actor)

    def _set_paused(self, queue: str, paused: bool, actor: Actor) -> bool:
        # A pause of a queue that has not seen a task yet registers it (an operator pauses ahead of
        # the deploy that starts using it; QueueLimitReached past DTQ_MAX_QUEUES); a resume of an
        # unknown queue, or any name that cannot be a queue, is QueueNotFound before any audit entry.
        layout = self.registry.ensure(queue) if paused and valid_queue_name(queue) else self.layout(queue)
        with self.audit.operation(actor, "queue.pause" if paused else "queue.resume", f"queue:{queue}", selected=1,
                                  selection={"queue": queue}) as op:
            now = self.clock.now_ms()
            layout, replies = self._each_partition(
                layout, "setPaused", lambda lay, tag: [lay.owner, 1 if paused else 0, now, actor.name])
            changed = any(int(reply[0]) == 1 for reply in replies)
            # The partitions' flags are what workers obey; the index is the copy listings and
            # idle workers read, written after them (pausing again repairs a pause cut short).
            if paused:
                self.client.hset(self.keys.paused_index(), queue, replies[0][1])
            else:
                self.client.hdel(self.keys.paused_index(), queue)
            op.done = int(changed)
        if changed:
            self._publish_queue_event("queue.paused" if paused else "queue.resumed", layout, now)
        return changed

    def purge(self, queue: str, actor: Actor) -> int:
        """Cancel every task waiting in the queue when the purge starts; return how many."""
        layout = self.layout(queue)
        k = self.keys
        now = self.clock.now_ms()
        pipe = self.client.pipeline(transaction=False)
        streams = [(tag, priority) for tag in layout.all_tags for priority in PRIORITIES]
        for tag, priority in streams:
            pipe.xrevrange(k.stream(tag, queue, priority), "+", "-", count=1)
        # Each stream's last entry when the purge starts: what arrives later is left alone.
        snapshots = {stream: found[0][0] for stream, found in zip(streams, pipe.execute(), strict=True) if found}
        with self.audit.operation(actor, "queue.purge", f"queue:{queue}", selection={"queue": queue}) as op:
            # Tasks parked by a full group (flow control) keep an entry the group has read already,
            # which the streams' purge below does not see: cancelled apart, with their entries.
            tags = list(layout.all_tags)
            while tags:
                pipe = self.client.pipeline(transaction=False)
                for tag in tags:
                    self.scripts("purgeParked", keys=[k.partition(tag)],
                                 args=[now, iso(now), BATCH * 4, self.config.retention_arg, queue, Keys.GROUP],
                                 client=pipe)
                replies = self.scripts.execute(pipe)
                op.advance(sum(int(cancelled) for cancelled, _ in replies))
                tags = [tag for tag, (_, more) in zip(tags, replies, strict=True) if int(more)]
            cursors = dict.fromkeys(snapshots, "")
            while cursors:
                pipe = self.client.pipeline(transaction=False)
                for (tag, priority), after in cursors.items():
                    self.scripts("purgeQueue", keys=[k.partition(tag)],
                                 args=[queue, priority, Keys.GROUP, now, iso(now), snapshots[(tag, priority)],
                                       BATCH * 4, after, self.config.retention_arg], client=pipe)
                replies = self.scripts.execute(pipe)
                op.advance(sum(int(cancelled) for cancelled, _ in replies))
                cursors = {stream: str(after) for stream, (_, after) in zip(list(cursors), replies, strict=True)
                           if after}
        self._publish_queue_event("queue.purged", layout, now)
        return op.done

    def delete(self, queue: str, actor: Actor) -> None:
        """Delete an empty queue (nothing waiting, in flight, scheduled or dead-lettered in any
        partition); raise QueueNotEmpty or QueueNotFound. Either every partition goes or none:
        each is closed first (deleteQueue close: new work is refused from then on), and when one
        is not empty the others are opened again. Audited when it happened (a refusal withdraws
        its intent: nothing changed)."""
        layout = self.layout(queue)  # QueueNotFound before any audit entry
        self._refuse_with_schedules(layout)
        with self.audit.operation(actor, "queue.delete", f"queue:{queue}", selected=1,
                                  selection={"queue": queue}) as op:
            layout, replies = self._each_partition(
                layout, "deleteQueue", lambda lay, tag: ["close", lay.owner, lay.queue, Keys.GROUP])
            refusals = [reply[1:] for reply in replies if _code(reply) == ErrorCode.QUEUE_NOT_EMPTY]
            if refusals:
                self._reopen(layout)
                waiting, in_flight, scheduled, dead = (sum(int(r[i]) for r in refusals) for i in range(4))
                raise_for_code(ErrorCode.QUEUE_NOT_EMPTY, task_id=None, script="deleteQueue", queue=queue,
                               waiting=waiting, in_flight=in_flight, scheduled=scheduled, dead=dead)
            self.registry.unregister(layout)
            op.done = 1
        # Numbered by the layout's epoch: the partitions' counters went with their keys.
        self._publish_queue_event("queue.deleted", layout, self.clock.now_ms(), seq=layout.epoch)

    def _refuse_with_schedules(self, layout: Layout) -> None:
        """A queue its periodic schedules fire into is not deleted (QueueNotEmpty naming them):
        deleting it would leave them firing into nothing. Delete or move them first."""
        tags = set(layout.all_tags)
        names = sorted(name for name, tag in text_hash(self.client.hgetall(self.keys.periodic_registry())).items()
                       if tag in tags)
        if names:
            raise QueueNotEmpty(f"queue {layout.queue!r} has periodic schedules: {', '.join(names)}; delete them "
                                "(or move them to another queue) first", queue=layout.queue, periodic=names)

    def _reopen(self, layout: Layout) -> None:
        pipe = self.client.pipeline(transaction=False)
        for tag in layout.all_tags:
            self.scripts("deleteQueue", keys=[self.keys.partition(tag)],
                         args=["reopen", layout.owner, layout.queue, Keys.GROUP], client=pipe)
        self.scripts.execute(pipe)

    def _each_partition(self, layout: Layout, script: str, args: Callable[[Layout, str], list[object]]
                        ) -> tuple[Layout, list[Any]]:
        """Call a partition script on every partition of the queue, pipelined. A partition that
        is not the layout's (PARTITION_CLOSED: the queue was deleted, or deleted and created
        again, since the registry was read) makes it read the registry again and call every
        partition once more: the scripts are idempotent."""
        for _ in range(2):
            pipe = self.client.pipeline(transaction=False)
            for tag in layout.all_tags:
                self.scripts(script, keys=[self.keys.partition(tag)], args=args(layout, tag), client=pipe)
            replies = self.scripts.execute(pipe)
            if all(_code(reply) != ErrorCode.PARTITION_CLOSED for reply in replies):
                return layout, replies
            if script == "deleteQueue":  # undo the closes of this attempt before reading again
                self._reopen(layout)
            self.registry.forget_cache()
            layout = self.layout(layout.queue)
        raise PartitionClosed(f"{script}: the partitions of queue {layout.queue!r} keep changing", queue=layout.queue)

    def _publish_queue_event(self, etype: str, layout: Layout, now: int, *, seq: object = None) -> None:
        """One event for a queue-wide change, numbered by the first partition's counter (event
        ids are "<ms>-<tag>-<seq>", as the scripts' emit makes them)."""
        tag = layout.all_tags[0]
        if seq is None:
            seq = self.client.incr(self.keys.event_seq(tag))
        self.client.publish(self.keys.events(), json.dumps(
            {"event_id": f"{now}-{tag}-{seq}", "type": etype, "task_id": None, "queue": layout.queue,
             "status": None, "attempt": 0, "ts": iso(now)}))
