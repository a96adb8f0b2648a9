"""Advancing workflows from the worker (docs/tasks.md, "Workflows"; docs/failure-modes.md).

A workflow step's task that ends leaves an outbox entry in its own partition (retain_finish, in
the script that ended it). `drive` turns entries into progress, each step idempotent:

1. read the entries (one HMGET per partition);
2. advance each workflow in its own slot (advanceWorkflow-1.lua): the step is marked finished
   once, its successors counted down once; the reply names the steps now ready;
3. create those steps' tasks under their pre-assigned ids (createSteps-1.lua: a step created
   already is left alone), then record them as created (startSteps-1.lua);
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
from ..keys import NotOurTaskId, tag_of
from ..workflow_steps import REDRIVE_AFTER_MS, Call, Ready, advance_call, create_calls, ready_of, start_calls

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
            steps = list(ready.values())
            created = await self._run(create_calls(keys, store.config, steps, now, await store.events.aflag(
                store.client)))
            closed = sum(1 for reply in created for status in reply if status == "closed")
            if closed:
                logger.error("%d workflow step(s) not created: their queue's partition was deleted", closed)
            for reply in await self._run(start_calls(keys, steps)):
                if isinstance(reply, list) and reply and reply[0] == "cancel":
                    await self.cancel_tasks([str(t) for t in reply[1]])
        faults.reach(store.config.test_fault, "before_outbox_settle")
        if settle:
            return sum(int(n) for n in await self._run(
                [("settleOutbox", [keys.partition(tag)], pairs) for tag, pairs in settle.items()]))
        return 0

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
