"""Consumption (docs/failure-modes.md: a queue paused or deleted under a worker, a stream that
lost its consumer group, burst mode): which queues this worker serves, and fetching work.

Hot path per batch: one fetchTasks script (read + claim up to the free slots); an idle worker
sends it behind a BLPOP on its wake list(s), so waking up costs no extra round trip.
"""

from __future__ import annotations

import asyncio
import logging

import redis

from ..keys import PRIORITIES
from .executor import Row
from .state import WorkerState

logger = logging.getLogger("dtq.worker")

BLOCK_MS = 1000  # longest blocking read; bounds how long a stop request waits for the consumer
QUEUE_REFRESH_S = 1.0
BURST_HORIZON_S = 1.0  # --burst also waits for retries and delayed tasks due this soon


class FetchLoop(WorkerState):
    """The Worker's consumer loop (a mixin of Worker)."""

    async def _refresh_queues(self, force: bool = False) -> None:
        if not force and self.clock.monotonic() - self._refreshed_at < QUEUE_REFRESH_S:
            return
        known, paused = await self.store.known_and_paused()
        queues = self.fixed_queues or sorted(known)
        new = [q for q in queues if q not in self._queues]
        if new:
            await self.store.ensure_queues(new)  # marks them ready: the next fetch looks at them
            self._drained = False
        self._queues = queues
        # The fetch script skips paused queues itself (a pause lands between two refreshes); a
        # worker with --queues also stops waiting on their wake lists.
        serving = [q for q in queues if q not in paused] if self.fixed_queues else None
        if serving != self._serving:
            self._drained = False  # a resumed queue may hold work that rang no bell here
        self._serving = serving
        self._all_streams = [self.keys.stream(q, p) for p in PRIORITIES for q in queues]
        self._all_stream_set = frozenset(self._all_streams)
        self._refreshed_at = self.clock.monotonic()

    async def _consume(self) -> None:
        while not self._stopping:
            await self._refresh_queues()
            free = self._free_slots()
            if free <= 0:
                self._slot_freed.clear()
                if self._free_slots() <= 0 and not self._stopping:
                    await self._slot_freed.wait()
                continue
            if self._serving == []:  # every queue of --queues is paused
                if self.burst:
                    self.request_stop()
                    return
                await self._pause(0.5)
                continue
            try:
                rows = await self._fetch(free)
            except redis.exceptions.ResponseError as exc:
                if "NOGROUP" not in str(exc):
                    raise
                # A stream was deleted by hand: recreate the groups rather than fail every fetch.
                logger.warning("worker_id=%s a queue stream lost its consumer group; recreating it", self.worker_id)
                await self.store.ensure_queues(self._queues)
                self._drained = False  # its entries rang before the group existed: look, don't wait
                continue
            if rows is None:
                return
            for row in rows:
                self._start(row)
            # Let the attempts just started reach their first await (their handler's I/O goes
            # out now) before this loop's next fetch: shorter latency on an idle worker.
            await asyncio.sleep(0)

    async def _fetch(self, free: int) -> list[Row] | None:
        """Claim up to `free` entries, waiting for work when there is none; None ends a burst."""
        if not self.burst:
            # After a fetch that came up short, whatever arrives later rings a wake list: wait
            # on it straight away instead of spending a round trip on another empty fetch.
            rows = [] if self._drained else await self.store.fetch(self._serving, free)
            if not rows:
                rows = await self.store.wait_and_fetch(self._serving, free, BLOCK_MS)
            self._drained = len(rows) < free
            return rows
        rows = await self.store.fetch(self._serving, free)
        if rows:
            return rows
        # The scheduler may have queued due work since the fetch: look once more.
        if await self._burst_done():
            rows = await self.store.fetch(self._serving, free)
            if not rows:
                self.request_stop()
                return None
            return rows
        self._slot_freed.clear()
        await asyncio.sleep(0.05)
        return []

    async def _burst_done(self) -> bool:
        """Burst mode ends when nothing waits, runs, or falls due within BURST_HORIZON_S."""
        if self._running or self._unacked or self._completions:
            return False
        horizon = self.clock.now_ms() + int(BURST_HORIZON_S * 1000)
        pipe = self.client.pipeline(transaction=False)
        pipe.zcount(self.keys.schedule(), "-inf", horizon)
        pipe.zcard(self.keys.schedule_claims())  # due work between the scheduler's two scripts
        due, claimed = await pipe.execute()
        return int(due) == 0 and int(claimed) == 0
