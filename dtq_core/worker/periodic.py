"""The leader's firing of periodic schedules (docs/tasks.md#periodic-tasks).

Each leader round probes the periodic index of every queue's first partition (where schedules
live: engine/periodic.py) in its lease pipeline; for a partition with a schedule due it reads the
due schedules, computes what each fires (dtq_core/firing.py: the ticks on time, the missed ones
and what misfire makes of them, the next tick) and calls firePeriodic-1 once per schedule, all
pipelined. The script is fenced by the partition's lease and compare-and-sets the schedule's
next tick and revision, so a leader that stalled past its lease, or one that read a schedule
just changed, fires nothing; the next round computes again.

A schedule moved to another queue keeps its last task, in the old queue's partition: another
slot on a cluster, which the script may not read. For overlap=skip the leader reads that task's
status itself and passes what it found.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping

from ..config import DtqConfig
from ..engine.tasks import RECENT_CAP
from ..errors import ErrorCode
from ..firing import FirePlan, fire_args, plan
from ..keys import is_task_id, tag_of
from ..task import TERMINAL
from ..ticks import BadSchedule, Ticks
from .store import WorkerStore

logger = logging.getLogger("dtq.worker")

DUE_BATCH = 100  # schedules of one partition fired per round at most (the rest the next round)


def grace_ms(config: DtqConfig) -> int:
    """How late a tick may fire and still count as on time: a leader handover takes up to the
    lease TTL, plus a few leader rounds to notice (seconds on a loaded host)."""
    return int((config.scheduler_lock_ttl_s + max(2.0, 8 * config.scheduler_interval_s)) * 1000)


class PeriodicFirer:
    """Fires the due schedules of the partitions the leader holds."""

    def __init__(self, store: WorkerStore) -> None:
        self.store = store

    async def fire_due(self, depth_limits: Mapping[str, int]) -> int:
        """Fire what is due in these partitions (tag -> its depth gate); return tasks created."""
        store, k = self.store, self.store.keys
        tags = list(depth_limits)
        if not tags:
            return 0
        now = store.clock.now_ms()
        pipe = store.client.pipeline(transaction=False)
        for tag in tags:
            pipe.zrangebyscore(k.periodic_index(tag), "-inf", now, start=0, num=DUE_BATCH)
        due = [(tag, str(name)) for tag, names in zip(tags, await pipe.execute(), strict=True) for name in names]
        if not due:
            return 0
        pipe = store.client.pipeline(transaction=False)
        for tag, name in due:
            pipe.hmget(k.periodic(tag, name), "spec", "next", "rev", "paused", "overlap", "last_task")
        rows = await pipe.execute()
        busy = await self._busy_elsewhere(due, rows)
        plans: list[tuple[str, str, list[object]]] = []
        for (tag, name), (spec, next_raw, rev, paused, _, _) in zip(due, rows, strict=True):
            args = self._args(tag, name, spec, next_raw, rev, paused, now, depth_limits[tag], (tag, name) in busy)
            if args is not None:
                plans.append((tag, name, args))
        if not plans:
            return 0
        pipe = store.client.pipeline(transaction=False)
        for tag, _, args in plans:
            await store.scripts("firePeriodic", keys=[k.partition(tag)], args=args, client=pipe)
        created = 0
        for (tag, name, _), reply in zip(plans, await store.scripts.aexecute(pipe, raise_on_error=False), strict=True):
            if isinstance(reply, Exception):
                logger.error("periodic=%s tag=%s fire failed: %s", name, tag, reply)
            elif reply == ErrorCode.LEASE_LOST:
                logger.info("periodic=%s tag=%s not fired: the partition's lease is no longer ours", name, tag)
            elif int(reply[0]) != ErrorCode.OK:
                logger.warning("periodic=%s tag=%s not fired (code %s)", name, tag, reply[0])
            else:
                created += len(reply[1])
                for task_id in reply[1]:
                    logger.debug("periodic=%s fired task_id=%s", name, task_id)
        return created

    async def _busy_elsewhere(self, due: list[tuple[str, str]], rows: list[list[str | None]]) -> set[tuple[str, str]]:
        """The due overlap=skip schedules whose last task is in another partition (moved from
        another queue) and not finished. Rare: a round trip only when there are any."""
        away = [(key, str(last)) for key, (*_, overlap, last) in zip(due, rows, strict=True)
                if overlap == "skip" and is_task_id(last) and tag_of(str(last)) != key[0]]
        if not away:
            return set()
        pipe = self.store.client.pipeline(transaction=False)
        for _, task_id in away:
            pipe.hget(self.store.keys.task(task_id), "status")
        statuses = await pipe.execute()
        # A record gone (past its retention) is a run long finished.
        return {key for (key, _), status in zip(away, statuses, strict=True) if status and status not in TERMINAL}

    def _args(self, tag: str, name: str, spec_raw: str | None, next_raw: str | None, rev: str | None,
              paused: str | None, now: int, depth: int, busy_elsewhere: bool) -> list[object] | None:
        if not spec_raw or paused == "1" or not (next_raw or "").isdigit():
            return None
        try:
            spec = json.loads(spec_raw)
            ticks = Ticks(cron=spec.get("cron"), timezone=spec.get("timezone") or "UTC",
                          every_seconds=spec.get("every_seconds"))
            fire: FirePlan | None = plan(ticks, int(str(next_raw)), now, grace_ms(self.store.config),
                                         str(spec.get("misfire") or "skip"))
        except (ValueError, TypeError, AttributeError, BadSchedule) as exc:
            logger.error("periodic=%s tag=%s: its stored spec cannot be evaluated (%s); not fired", name, tag, exc)
            return None
        if fire is None:
            return None
        c = self.store.config
        return fire_args(tag=tag, worker_id=self.store.worker_id, name=name, rev=str(rev or "0"), fire=fire,
                         misfire=str(spec.get("misfire") or "skip"), now_ms=now,
                         retention_ms=c.task_retention_s * 1000, marker_ttl_ms=c.idem_ttl_s * 1000,
                         max_depth=depth, recent_cap=RECENT_CAP, busy_elsewhere=busy_elsewhere)
