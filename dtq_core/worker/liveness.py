"""Heartbeats, lease renewal and the freeze/gap rule (docs/failure-modes.md: a frozen or
unreachable Redis, a blocked event loop).

Each heartbeat re-registers the worker and refreshes the idle time of every entry it holds, so no
peer's reaper takes them. `Liveness` is the pure part: given the times of this worker's own beats,
whether an entry idle past the visibility timeout may be taken as abandoned.
"""

from __future__ import annotations

import asyncio
import logging

from ..clock import Clock, RedisAlignedClock, redis_time_ms
from ..config import DtqConfig
from .state import WorkerState

logger = logging.getLogger("dtq.worker")

CLOCK_ALIGN_S = 10.0  # how often a worker re-measures its host's clock against Redis's


class Liveness:
    """The times of this worker's heartbeats (monotonic): a long gap means every worker's in-flight
    entries aged meanwhile (Redis frozen or unreachable, or this loop blocked), see may_reclaim."""

    def __init__(self, config: DtqConfig, clock: Clock, worker_id: str) -> None:
        self.config = config
        self.clock = clock
        self.worker_id = worker_id
        self.last_beat: float | None = None
        self.healthy_since = float("-inf")

    def beat_done(self) -> None:
        now = self.clock.monotonic()
        if self.last_beat is not None and now - self.last_beat > self.config.beat_gap_s:
            self.healthy_since = now
            logger.warning("worker_id=%s heartbeats resumed after %.1fs without one (Redis frozen or unreachable, "
                           "or this event loop blocked); reclaiming nothing for %.0fs so that live workers refresh "
                           "their entries first", self.worker_id, now - self.last_beat,
                           self.config.visibility_timeout_s)
        self.last_beat = now

    def may_reclaim(self) -> bool:
        """Whether an entry idle past the visibility timeout now means its owner is gone.

        While heartbeats cannot be written (Redis frozen or unreachable), every worker's entries
        age together; right after, the reaper that reconnects first would take the entries of
        workers that are alive and still running them, and run those tasks a second time. So a
        reaper reclaims only while its own heartbeats are on time, and only a visibility timeout
        after they resumed from a gap: live owners have refreshed their entries by then.
        """
        now = self.clock.monotonic()
        return (self.last_beat is not None and now - self.last_beat <= self.config.beat_gap_s
                and now - self.healthy_since >= self.config.visibility_timeout_s)

    def trusted(self, took_s: float) -> bool:
        """Whether a reclaim round that took took_s may keep what it claimed: a round that
        stalled as long as a gap saw entries that aged while it did."""
        return took_s <= self.config.beat_gap_s and self.may_reclaim()


class HeartbeatLoop(WorkerState):
    """The Worker's heartbeat loop (a mixin of Worker)."""

    async def _heartbeat_loop(self) -> None:
        while True:  # beat first: restarted after a failure (see _supervise), it beats at once
            await self._align_clock()
            control = await self.store.heartbeat(self._info(), self._in_flight_rows())
            self.liveness.beat_done()
            if control:
                self._obey(control)
            if self._beat_failed:
                # Wake every loop backing off after an error: this beat says Redis answers again.
                self._beat_failed = False
                self._loading_said = False
                recovered, self._redis_back = self._redis_back, asyncio.Event()
                recovered.set()
                self.wake.retry_now()
            await asyncio.sleep(self.config.heartbeat_every_s)

    def _obey(self, control: str) -> None:
        """What an operator told this worker through its record (engine.workers): quiet takes no
        more tasks (claimed ones not started go back; what runs finishes; the worker stays up and
        keeps its other duties), stop drains and exits as SIGTERM does."""
        if control == "stop":
            if not self._stopping:
                logger.warning("worker_id=%s told to stop by an operator", self.worker_id)
            self.request_stop()
        elif control == "quiet" and not self.quiet:
            logger.warning("worker_id=%s told to quiet by an operator: taking no more tasks", self.worker_id)
            self.quiet = True
            if self.state == "running":
                self.state = "quiet"
            self._slot_freed.set()  # the consumer wakes to hand its backlog back
            if hasattr(self, "wake"):
                self.wake.poke()  # and ends a wait on the wake list, whose queued fetch may claim

    async def _align_clock(self) -> None:
        """Measure this host's clock against Redis's. Every worker writing and comparing times on
        Redis's clock keeps a host whose clock is off from promoting delayed tasks and retries
        early or late, expiring tasks early, or making its peers (or itself) look stale."""
        clock = self.clock
        if not isinstance(clock, RedisAlignedClock):
            return  # a clock given by the caller (tests) is kept as it is
        if clock.monotonic() - self._aligned_at < CLOCK_ALIGN_S:
            return  # clocks drift slowly: a heartbeat stays one round trip in between
        sent = clock.system_ms()
        redis_ms = redis_time_ms(await self.client.time())
        received = clock.system_ms()
        if received - sent > 1000:
            return  # a reading that slow says little
        self._aligned_at = clock.monotonic()
        if clock.align(sent, redis_ms, received) and abs(clock.offset_ms) > 1000:
            logger.warning("worker_id=%s this host's clock is %+.1fs off Redis's; keeping time by Redis's "
                           "(run NTP on every host)", self.worker_id, -clock.offset_ms / 1000)
