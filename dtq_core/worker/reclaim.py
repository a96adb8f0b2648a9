"""The visibility reaper (docs/failure-modes.md: a worker that crashed, was killed or stopped
answering): entries idle past the visibility timeout are claimed again and their tasks run by
this worker, with a new attempt number that fences the old owner's completion.

What a round looks at is bounded (_reap_partitions) so that its cost does not grow with the number
of queues; whether a round may reclaim at all is the freeze/gap rule (liveness.Liveness).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from .state import WorkerState
from .store import Partition

logger = logging.getLogger("dtq.worker")

RUNNING_SWEEP = 100  # partitions whose running index a reaper round reads (all of them, up to this many)
SWEEP_PARTITIONS = 10  # partitions per round looked at for pending entries no index names
PRUNE_EVERY_S = 30.0  # how often the reaper drops registrations of long-gone workers


def rotating_slice(items: Sequence[Partition], start: int, size: int) -> tuple[list[Partition], int]:
    """`size` items from `start` on, wrapping (all of them when there are no more), and where the
    next slice starts."""
    n = len(items)
    if n <= size:
        return list(items), 0
    start %= n
    return [items[(start + i) % n] for i in range(size)], start + size


class ReaperLoop(WorkerState):
    """The Worker's reaper loop (a mixin of Worker)."""

    async def _reaper_loop(self) -> None:
        last_prune = 0.0
        while not self._stopping:
            await self._pause(self.config.reaper_every_s)
            if self._stopping:
                return
            await self._reap_once()
            if self.clock.monotonic() - last_prune > PRUNE_EVERY_S:
                last_prune = self.clock.monotonic()
                await self.store.prune_workers(self.config.worker_prune_after_s)

    async def _reap_once(self) -> None:
        """One round: claim entries idle past the visibility timeout, up to the free slots."""
        free = self._free_slots()
        # A draining or quiet worker takes no reclaimed work either: its peers reclaim.
        if free > 0 and not self.quiet and self.liveness.may_reclaim():
            rows = await self.store.reclaim(await self._reap_partitions(), free,
                                            ours=self._running.keys() | self._unacked.keys()
                                            | {row.entry_id for row in self._backlog},
                                            trusted=self.liveness.trusted)
            for row in rows:
                logger.info("task_id=%s attempt=%d worker_id=%s reclaimed after visibility timeout",
                            row.task_id, row.attempt, self.worker_id)
                self._start(row)
        if self.store.deleted_seen:
            logger.warning("worker_id=%s %d pending entr(ies) were deleted from their stream; the leader's "
                           "lost-task sweep requeues their tasks", self.worker_id, self.store.deleted_seen)
            self.store.deleted_seen = 0

    async def _reap_partitions(self) -> list[Partition]:
        """The partitions the reaper looks at this round (every served one, paused included: a lost
        attempt of a paused queue goes back to its stream), so that its cost does not grow with
        the number of queues:

        1. those whose running index is not empty, where every entry a worker claimed and has not
           acknowledged belongs (what a crashed worker leaves behind): the running index of every
           served partition, or of the next RUNNING_SWEEP of them, round robin, when there are more;
        2. those where workers silent past the visibility timeout held entries at their last
           heartbeat, so that a crash is found in the first round that may reclaim it however
           many partitions there are;
        3. the next SWEEP_PARTITIONS of all served partitions, round robin, for pending entries no
           index names (a task hash written or deleted by a tool): with few partitions every round
           looks at every one.
        """
        served = list(self._served.values())
        looked, self._running_sweep_at = rotating_slice(served, self._running_sweep_at, RUNNING_SWEEP)
        in_flight = set(await self.store.in_flight([p.tag for p in looked]))
        in_flight |= await self.store.silent_workers_partitions()
        sweep, self._sweep_at = rotating_slice(served, self._sweep_at, SWEEP_PARTITIONS)
        chosen = [p for p in served if p.tag in in_flight]
        return chosen + [p for p in sweep if p.tag not in in_flight]
