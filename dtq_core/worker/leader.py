"""Scheduler leadership (docs/failure-modes.md: the leader dies, two leaders, a scheduler claim
left behind, a stream entry lost): one worker at a time holds the leader lock and

- promotes due delayed tasks and retries to their streams (promote_once),
- returns scheduler claims a dead leader left between its two scripts (stale_claims_once),
- requeues running tasks whose stream entry is gone (lost_tasks_once).

Every worker is a candidate; the lock's TTL hands leadership over when its holder stops renewing.
"""

from __future__ import annotations

import logging

from .state import WorkerState

logger = logging.getLogger("dtq.worker")

PROMOTE_BATCH = 500  # what one promoteDue call moves at most: a full batch means more may be due


class LeaderLoop(WorkerState):
    """The Worker's scheduler loop (a mixin of Worker)."""

    async def _scheduler_loop(self) -> None:
        last_stale_check = last_sweep = 0.0
        while not self._stopping:
            if await self._lead_once():
                if self.clock.monotonic() - last_stale_check > self.config.stale_claim_check_every_s:
                    last_stale_check = self.clock.monotonic()
                    await self._stale_claims_once()
                if self.clock.monotonic() - last_sweep > self.config.lost_task_sweep_every_s:
                    last_sweep = self.clock.monotonic()
                    await self._lost_tasks_once()
            await self._pause(self.config.scheduler_interval_s)

    async def _lead_once(self) -> bool:
        """Take or renew the leader lock; as the leader, promote what is due. True when leader."""
        leader = await self.store.acquire_or_renew_lock(self.is_leader)
        if leader != self.is_leader:
            logger.info("worker_id=%s %s scheduler leadership", self.worker_id, "took" if leader else "lost")
            self.is_leader = leader
        if leader:
            await self._promote_once()
        return leader

    async def _promote_once(self) -> None:
        while await self.store.promote_due(PROMOTE_BATCH) >= PROMOTE_BATCH:
            pass

    async def _stale_claims_once(self) -> None:
        returned = await self.store.requeue_stale_claims()
        if returned > 0:
            logger.warning("worker_id=%s returned %d stale scheduler claim(s) to the schedule",
                           self.worker_id, returned)

    async def _lost_tasks_once(self) -> None:
        recovered = await self.store.recover_lost_tasks()
        if recovered > 0:
            logger.warning("worker_id=%s requeued %d running task(s) whose stream entry was lost",
                           self.worker_id, recovered)
