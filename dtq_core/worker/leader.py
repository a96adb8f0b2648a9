"""Scheduler leadership (docs/failure-modes.md: the leader dies, two leaders, a scheduler claim
left behind, a stream entry lost). One worker at a time holds the election key (Keys.leader(),
SET NX PX, renewed every tick) and, while it does, a lease on every registered partition
(Keys.lock(tag)), which fences that partition's leader scripts exactly as the single scheduler
lock did. As the leader it

- promotes due delayed tasks and retries to their streams (promote_once),
- returns scheduler claims a dead leader left between its two scripts (stale_claims_once),
- requeues running tasks whose stream entry is gone (lost_tasks_once),
- resizes queues to DTQ_QUEUE_PARTITIONS and forgets drained partitions (reconcile.py),
- fires the periodic schedules that are due (periodic.py), probed in the lease pipeline of each
  round, so a schedule fires within one DTQ_SCHEDULER_INTERVAL_S of its tick and an idle leader
  sends nothing more.
- re-drives workflow outbox entries left behind (a worker died between a step's end and its
  workflow's advance, or the end came from a cancel, an expiry or a lost task): every
  WORKFLOW_REDRIVE_EVERY_S, one ZRANGEBYSCORE per leased partition (worker/workflows.py).
- rolls the partitions' task history up into the console's global series and folds complete
  hours, every HISTORY_EVERY_S (worker/history.py).

Every worker is a candidate; the key's TTL hands leadership over when its holder stops renewing,
and the leases, renewed in the same pipeline, lapse with it.
"""

from __future__ import annotations

import logging
import math

from ..partitions import parse_registry
from .history import HISTORY_EVERY_S, HistoryRoller
from .periodic import PeriodicFirer
from .reconcile import PartitionReconciler
from .state import WorkerState
from .workflows import REDRIVE_BATCH, WorkflowDriver

logger = logging.getLogger("dtq.worker")

PROMOTE_BATCH = 500  # what one claimDue call moves at most: a full batch means more may be due
REGISTRY_EVERY_S = 1.0  # how often the leader reads the registry for partitions to lease
WORKFLOW_REDRIVE_EVERY_S = 2.0  # how often the leader looks for workflow outbox entries left behind
REDRIVE_ROUNDS = 20  # batches of REDRIVE_BATCH entries a partition may re-drive per look


class LeaderLoop(WorkerState):
    """The Worker's scheduler loop (a mixin of Worker)."""

    # Every registered partition (serving and draining), as the leader last read the registry.
    _partitions: tuple[str, ...] = ()
    _registry_read_at: float = float("-inf")
    _reconciler: PartitionReconciler | None = None
    # Each queue's first partition (where its periodic schedules live) -> its depth gate.
    _periodic_depths: dict[str, int] = {}
    _firer: PeriodicFirer | None = None
    # Each queue -> its partitions (serving and draining), as the leader last read the registry.
    _layouts: dict[str, tuple[str, ...]] = {}
    _roller: HistoryRoller | None = None

    async def _scheduler_loop(self) -> None:
        last_stale_check = last_sweep = last_reconcile = last_redrive = last_history = 0.0
        while not self._stopping:
            if await self._lead_once():
                now = self.clock.monotonic()
                if now - last_reconcile > self.config.partition_reconcile_every_s:
                    last_reconcile = now
                    await self._reconcile_once()
                if now - last_stale_check > self.config.stale_claim_check_every_s:
                    last_stale_check = now
                    await self._stale_claims_once()
                if now - last_sweep > self.config.lost_task_sweep_every_s:
                    last_sweep = now
                    await self._lost_tasks_once()
                if now - last_redrive > WORKFLOW_REDRIVE_EVERY_S:
                    last_redrive = now
                    await self._workflow_redrive_once()
                if now - last_history > HISTORY_EVERY_S:
                    last_history = now
                    await self._history_once()
            await self._pause(self.config.scheduler_interval_s)

    async def _lead_once(self) -> bool:
        """Take or renew leadership and the partitions' leases; as the leader, promote what is
        due. True when leader."""
        if not self.is_leader:
            if not await self.store.take_leadership():
                return False
            # Said at once: should the round below fail, the next tick renews what it holds.
            logger.info("worker_id=%s took scheduler leadership", self.worker_id)
            self.is_leader = True
        leader, due, periodic_due = await self._lead_round()
        if not leader:
            logger.info("worker_id=%s lost scheduler leadership", self.worker_id)
            self.is_leader = False
            return False
        await self._promote_once(due)
        await self._periodic_once(periodic_due)
        return True

    async def _lead_round(self) -> tuple[bool, tuple[str, ...], tuple[str, ...]]:
        """(still leader, partitions with something due, partitions with a periodic schedule
        due). When the registry read in the round names partitions not leased yet (a new leader,
        a new queue), a second round leases them at once rather than one tick later."""
        read = self.clock.monotonic() - self._registry_read_at > REGISTRY_EVERY_S
        found = await self.store.lead_round(self._partitions, read_registry=read,
                                            periodic_tags=tuple(self._periodic_depths))
        if found.leader and found.registry is not None and self._learn(found.registry):
            found = await self.store.lead_round(self._partitions, read_registry=False,
                                                periodic_tags=tuple(self._periodic_depths))
        return found.leader, found.due, found.periodic_due

    def _learn(self, registry: dict[str, str]) -> bool:
        """Take in the registry just read; True when it names partitions this leader did not know."""
        self._registry_read_at = self.clock.monotonic()
        layouts = parse_registry(registry).values()
        partitions = tuple(sorted({tag for layout in layouts for tag in layout.all_tags}))
        new = not set(partitions) <= set(self._partitions)
        self._partitions = partitions
        self._layouts = {layout.queue: layout.all_tags for layout in layouts}
        most = self.config.max_queue_depth
        self._periodic_depths = {layout.tags[0]: most if most <= 0 else math.ceil(most / len(layout.tags))
                                 for layout in layouts if layout.tags}
        return new

    async def _periodic_once(self, due: tuple[str, ...]) -> None:
        if not due:
            return
        if self._firer is None or self._firer.store is not self.store:
            self._firer = PeriodicFirer(self.store)
        await self._firer.fire_due({tag: self._periodic_depths.get(tag, 0) for tag in due})

    async def _promote_once(self, due: tuple[str, ...]) -> None:
        tags = list(due)
        while tags:
            claimed = await self.store.promote_due(tags, PROMOTE_BATCH)
            tags = [tag for tag, count in claimed.items() if count >= PROMOTE_BATCH]

    async def _stale_claims_once(self) -> None:
        returned = sum(n for n in (await self.store.requeue_stale_claims(sorted(self.store.held_leases))).values()
                       if n > 0)
        if returned > 0:
            logger.warning("worker_id=%s returned %d stale scheduler claim(s) to the schedule",
                           self.worker_id, returned)

    async def _lost_tasks_once(self) -> None:
        recovered = sum(n for n in (await self.store.recover_lost_tasks(sorted(self.store.held_leases))).values()
                        if n > 0)
        if recovered > 0:
            logger.warning("worker_id=%s requeued %d running task(s) whose stream entry was lost",
                           self.worker_id, recovered)

    async def _workflow_redrive_once(self) -> None:
        """Advance the workflows of outbox entries older than a few seconds in the partitions this
        leader holds (their worker died before advancing, or no worker saw the end)."""
        driver = WorkflowDriver(self.store)
        tags, settled = sorted(self.store.held_leases), 0
        try:
            for _ in range(REDRIVE_ROUNDS):  # a backlog (a big workflow cancelled) drains in one round
                stale = await driver.stale_entries(tags)
                if not stale:
                    break
                settled += await driver.drive(stale)
                tags = [tag for tag, ids in stale.items() if len(ids) >= REDRIVE_BATCH]
                if not tags:
                    break
        except Exception as exc:  # noqa: BLE001 - the entries stay; the next round tries again
            logger.warning("worker_id=%s re-driving workflow outbox entries failed (%s: %s)", self.worker_id,
                           type(exc).__name__, exc)
        if settled:
            logger.warning("worker_id=%s re-drove %d workflow outbox entr(ies) left behind", self.worker_id, settled)

    async def _history_once(self) -> None:
        if self._roller is None or self._roller.store is not self.store:
            self._roller = HistoryRoller(self.store)
        try:
            await self._roller.run_once(self._layouts, self.clock.now_ms())
        except Exception as exc:  # noqa: BLE001 - the console's charts lag; the next pass catches up
            logger.warning("worker_id=%s history roll-up failed (%s: %s)", self.worker_id, type(exc).__name__, exc)

    async def _reconcile_once(self) -> None:
        if self._reconciler is None or self._reconciler.store is not self.store:
            self._reconciler = PartitionReconciler(self.store, self.config)
        self._learn(await self._reconciler.run_once())
