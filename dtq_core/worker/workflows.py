"""Advancing workflows from the worker (docs/tasks.md, "Workflows"; docs/failure-modes.md).

A workflow step's task that ends leaves an outbox entry in its own partition (retain_finish, in
the script that ended it). `drive` turns entries into progress, each step idempotent:

1. read the entries (one HMGET per partition);
2. advance each workflow in its own slot (advanceWorkflow-1.lua): the step is marked finished
   once, its successors counted down once; the reply names the steps now ready;
3. create those steps' tasks under their pre-assigned ids (createSteps-1.lua: a step created
   already is left alone), then record them as created (startSteps-1.lua). A step whose queue
   was deleted while it waited is never recorded: its queue is registered again and the step
   created there, or, when that cannot be, the step ends FAILED (`create`);
4. delete the entries (settleOutbox-1.lua), last.

A crash before 4 leaves the entry, and the leader re-drives entries older than REDRIVE_AFTER_MS:
every step runs again and changes nothing twice. The worker that completed the tasks drives their
entries right after the completion batch; the leader catches whatever was left (a crash, an end
that no worker reported: a cancel, an expiry, a lost task dead-lettered).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .. import faults
from ..clock import iso
from ..errors import QueueLimitReached, raise_for_code
from ..keys import Keys, NotOurTaskId, tag_of
from ..partitions import Layout, choose_tags, parse_registry
from ..workflow_steps import (
    REDRIVE_AFTER_MS,
    Call,
    Ready,
    advance_call,
    create_calls,
    created_and_closed,
    fail_call,
    ready_of,
    start_calls,
)

if TYPE_CHECKING:
    from .store import WorkerStore

logger = logging.getLogger("dtq.worker")

REDRIVE_BATCH = 500  # outbox entries the leader takes per partition per call


class WorkflowDriver:
    def __init__(self, store: WorkerStore) -> None:
        self.store = store

    async def _run(self, calls: Sequence[Call]) -> list[Any]:
        """Script calls in one pipeline; the first failure is raised after all ran."""
        if not calls:
            return []
        store = self.store
        pipe = store.client.pipeline(transaction=False)
        for name, keys, args in calls:
            await store.scripts(name, keys=[keys[0]], args=args, client=pipe)
        replies = await store.scripts.aexecute(pipe, raise_on_error=False)
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return list(replies)

    async def drive(self, items: dict[str, list[str]]) -> int:
        """Advance the workflows of these ended tasks (partition tag -> task ids); returns how many
        outbox entries were settled. Raises on Redis trouble (the entries stay for the leader)."""
        store, keys = self.store, self.store.keys
        tags = [tag for tag, ids in items.items() if ids]
        if not tags:
            return 0
        pipe = store.client.pipeline(transaction=False)
        for tag in tags:
            pipe.hmget(keys.wf_outbox(tag), items[tag])
        found = await pipe.execute()
        now = store.clock.now_ms()
        advances: list[tuple[str, str, str, str]] = []  # (tag, task id, entry as read, workflow id)
        calls: list[Call] = []
        settle: dict[str, list[object]] = {}
        for tag, raws in zip(tags, found, strict=True):
            for task_id, raw in zip(items[tag], raws, strict=True):
                if raw is None:
                    continue  # settled already (by a peer, or a re-drive)
                try:
                    entry = json.loads(raw)
                    call = advance_call(keys, store.config, task_id, entry, now)
                except (ValueError, KeyError, TypeError, NotOurTaskId) as exc:
                    logger.error("task_id=%s workflow outbox entry unreadable, dropped (%s): %r", task_id, exc, raw)
                    settle.setdefault(tag, []).extend([task_id, raw])
                    continue
                advances.append((tag, task_id, raw, str(entry["w"])))
                calls.append(call)
        ready: dict[tuple[str, int], Ready] = {}
        if calls:
            pipe = store.client.pipeline(transaction=False)
            for name, k, args in calls:
                await store.scripts(name, keys=[k[0]], args=args, client=pipe)
            replies = await store.scripts.aexecute(pipe, raise_on_error=False)
            for (tag, task_id, raw, wid), reply in zip(advances, replies, strict=True):
                if isinstance(reply, Exception):
                    logger.warning("task_id=%s workflow_id=%s advance failed (%s); the leader will re-drive it",
                                   task_id, wid, reply)
                    continue
                if reply and reply[0] in ("missing", "stale"):
                    logger.info("task_id=%s workflow_id=%s outbox entry dropped: workflow %s", task_id, wid,
                                "gone" if reply[0] == "missing" else "step now runs under another task")
                for r in ready_of(wid, reply)[1]:
                    ready[(r.workflow_id, r.index)] = r
                settle.setdefault(tag, []).extend([task_id, raw])
        if ready:
            await self.create(list(ready.values()), now)
        await self._index([wid for _tag, task_id, _raw, wid in advances if task_id == f"wf:{wid}"])
        faults.reach(store.config.test_fault, "before_outbox_settle")
        if settle:
            return sum(int(n) for n in await self._run(
                [("settleOutbox", [keys.partition(tag)], pairs) for tag, pairs in settle.items()]))
        return 0

    async def _index(self, started: list[str]) -> None:
        """List the workflows whose start is re-driven here: a submitter that died between
        createWorkflow and its ZADD left one out of the listing (a global key, so not written by
        the script). NX: an entry there already keeps its score."""
        if not started:
            return
        store = self.store
        pipe = store.client.pipeline(transaction=False)
        for wid in started:
            pipe.hget(store.keys.workflow(wid), "created_at")
        created = await pipe.execute()
        scores = {wid: int(c) for wid, c in zip(started, created, strict=True) if c is not None and str(c).isdigit()}
        if scores:
            await store.client.zadd(store.keys.workflows(), scores, nx=True)

    async def create(self, steps: list[Ready], now: int) -> None:
        """Create these ready steps' tasks and record them as created. A step whose partition no
        longer serves its queue (the queue was deleted while the step waited) is never recorded:
        the queue is registered again and the step created in it (_reopen), or, when that cannot
        be, the step ends FAILED, and what that makes ready is created in turn."""
        store = self.store
        events = await store.events.aflag(store.client)
        while steps:
            made, closed = created_and_closed(steps, await self._run(create_calls(
                store.keys, store.config, steps, now, events)))
            lost: list[tuple[Ready, str]] = []
            if closed:
                again, lost = await self._reopen(closed)
                if again:
                    more, gone = created_and_closed(again, await self._run(create_calls(
                        store.keys, store.config, again, now, events)))
                    made += more
                    lost += [(r, f"QueueDeleted: queue {r.definition['x']['queue']!r} was deleted again before "
                                 "the step could be created") for r in gone]
            for reply in await self._run(start_calls(store.keys, store.config, made)):
                if isinstance(reply, list) and reply and reply[0] == "cancel":
                    await self.cancel_tasks([str(t) for t in reply[1]])
            steps = []
            if lost:
                for (r, why), reply in zip(lost, await self._run(
                        [fail_call(store.keys, store.config, r, why, now) for r, why in lost]), strict=True):
                    logger.error("workflow_id=%s step=%d task_id=%s not created, the step ends FAILED: %s",
                                 r.workflow_id, r.index, r.task_id, why)
                    steps += ready_of(r.workflow_id, reply)[1]

    async def _reopen(self, closed: list[Ready]) -> tuple[list[Ready], list[tuple[Ready, str]]]:
        """Register again the queues of steps whose partition was closed (the queue deleted while
        they waited), as a DLQ retry of a deleted queue's dead letters does, preferring the
        steps' own partitions, so that each is created under the id it was given. Returns (the
        steps to create again, the steps that cannot be created: each with why)."""
        by_queue: dict[str, list[Ready]] = {}
        for r in closed:
            by_queue.setdefault(str(r.definition["x"]["queue"]), []).append(r)
        again: list[Ready] = []
        lost: list[tuple[Ready, str]] = []
        for queue, steps in by_queue.items():
            try:
                layout = await self._ensure_queue(queue, [tag_of(r.task_id) for r in steps])
            except QueueLimitReached as exc:
                lost += [(r, f"QueueDeleted: queue {queue!r} was deleted before the step was created and cannot "
                             f"be created again: {exc.message}") for r in steps]
                continue
            logger.warning("queue %s was deleted while %d workflow step(s) waited for it: they are created in "
                           "the queue registered again", queue, len(steps))
            for r in steps:
                if tag_of(r.task_id) in layout.tags:
                    again.append(r)
                else:  # registered anew by another process, without the step's partition
                    lost.append((r, f"QueueDeleted: queue {queue!r} was deleted before the step was created, and "
                                    f"created again without its partition {tag_of(r.task_id)}"))
        return again, lost

    async def _ensure_queue(self, queue: str, prefer: Sequence[str]) -> Layout:
        """The queue's layout, registering it (under DTQ_MAX_QUEUES: QueueLimitReached) when it is
        not, on the preferred tags where they are free, and opening its partitions."""
        store = self.store
        registry = await store.read_registry()
        raw = registry.get(queue)
        if raw is None:
            taken = {tag for layout in parse_registry(registry).values() for tag in layout.all_tags}
            count = store.config.partitions_of(queue)
            mine = [tag for tag in dict.fromkeys(prefer) if tag not in taken][:count]
            master_of_slot, masters = await store.slot_map()
            rest = choose_tags(queue, len(mine), count - len(mine), taken | set(mine),
                               master_of_slot=master_of_slot, masters=masters)
            proposed = Layout(queue=queue, tags=tuple(mine + rest))
            code, raw = await store.scripts("registerQueue", keys=[store.keys.queues()],
                                            args=[queue, proposed.to_json(), store.config.max_queues])
            if int(code) < 0:
                raise_for_code(int(code), task_id=None, script="registerQueue", queue=queue, count=raw,
                               max_queues=store.config.max_queues)
        layout = Layout.from_json(queue, str(raw))
        # Closed partitions of this layout (deleted again meanwhile) are answered by createSteps.
        await self._run([("openPartition", [store.keys.partition(tag)], [layout.owner, layout.queue, Keys.GROUP])
                         for tag in layout.all_tags])
        return layout

    async def cancel_tasks(self, task_ids: Sequence[str]) -> None:
        """Cancel tasks created for a workflow cancelled meanwhile (a refusal: already finished)."""
        store = self.store
        now = store.clock.now_ms()
        calls: list[Call] = []
        for task_id in task_ids:
            try:
                calls.append(("cancelTask", [store.keys.partition(tag_of(task_id))],
                              [task_id, now, iso(now), store.config.retention_arg]))
            except NotOurTaskId:
                continue
        await self._run(calls)

    async def stale_entries(self, tags: Sequence[str]) -> dict[str, list[str]]:
        """The outbox entries of these partitions older than REDRIVE_AFTER_MS (one ZRANGEBYSCORE
        per partition, pipelined): what the leader re-drives."""
        if not tags:
            return {}
        store = self.store
        before = store.clock.now_ms() - REDRIVE_AFTER_MS
        pipe = store.client.pipeline(transaction=False)
        for tag in tags:
            pipe.zrangebyscore(store.keys.wf_outbox_due(tag), "-inf", before, start=0, num=REDRIVE_BATCH)
        replies = await pipe.execute()
        return {tag: [str(i) for i in ids] for tag, ids in zip(tags, replies, strict=True) if ids}
