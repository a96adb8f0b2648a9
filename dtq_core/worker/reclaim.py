"""The visibility reaper (docs/failure-modes.md: a worker that crashed, was killed or stopped
answering): entries idle past the visibility timeout are claimed again and their tasks run by
this worker, with a new attempt number that fences the old owner's completion.

What a round looks at is bounded (_reap_streams) so that its cost does not grow with the number
of queues; whether a round may reclaim at all is the freeze/gap rule (liveness.Liveness).
"""

from __future__ import annotations

import logging

from .state import WorkerState

logger = logging.getLogger("dtq.worker")

SWEEP_STREAMS = 30  # streams per reaper round looked at beyond those with tasks in flight
PRUNE_EVERY_S = 30.0  # how often the reaper drops registrations of long-gone workers


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
        if free > 0 and self.liveness.may_reclaim():  # a draining worker takes no reclaimed work either
            rows = await self.store.reclaim(await self._reap_streams(), free,
                                            ours=self._running.keys() | self._unacked.keys(),
                                            trusted=self.liveness.trusted)
            for row in rows:
                logger.info("task_id=%s attempt=%d worker_id=%s reclaimed after visibility timeout",
                            row.task_id, row.attempt, self.worker_id)
                self._start(row)
        if self.store.deleted_seen:
            logger.warning("worker_id=%s %d pending entr(ies) were deleted from their stream; the leader's "
                           "lost-task sweep requeues their tasks", self.worker_id, self.store.deleted_seen)
            self.store.deleted_seen = 0

    async def _reap_streams(self) -> list[str]:
        """The streams the reaper looks at this round, so that its cost does not grow with the
        number of queues:

        1. those of the tasks in the running index, where every entry a worker claimed and has not
           acknowledged belongs (what a crashed worker leaves behind);
        2. the next SWEEP_STREAMS of all served streams, round robin, for pending entries no index
           names (a task hash written or deleted by a tool, state older than the index): with few
           queues every round still looks at every stream.
        """
        streams, n = self._all_streams, len(self._all_streams)
        chosen = [s for s in await self.store.in_flight_streams() if s in self._all_stream_set]
        if n <= SWEEP_STREAMS:
            sweep = streams
        else:
            start = self._sweep_at % n
            sweep = [streams[(start + i) % n] for i in range(SWEEP_STREAMS)]
            self._sweep_at = start + SWEEP_STREAMS
        taken = set(chosen)
        return chosen + [s for s in sweep if s not in taken]
