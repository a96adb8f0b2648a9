"""The worker process: consumption, execution, completion, heartbeats, the visibility reaper, the
cancel watcher and candidacy for scheduler leadership, each a supervised asyncio loop.

Hot path per batch: one fetchTasks script (read + claim up to the free slots; an idle worker
sends it behind a BLPOP on its wake list(s), so waking up costs no extra round trip), the
handlers, one completeTasks script for everything that finished meanwhile (state, result, XACK,
event).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis

from .. import faults, registry
from ..clock import Clock, RedisAlignedClock
from ..config import DtqConfig
from ..connection import async_client, eviction_policy_async, eviction_problem
from ..errors import WorkerNameTaken
from ..keys import PRIORITIES, Keys
from ..task import Outcome
from .executor import TIMEOUT_CHECK_S, AttemptRunner, Completion, Execution, Row, expire_overdue
from .store import WorkerStore

logger = logging.getLogger("dtq.worker")

BLOCK_MS = 1000  # longest blocking read; bounds how long a stop request waits for the consumer
QUEUE_REFRESH_S = 1.0
MAX_BACKOFF_S = 10.0
LOADING_BACKOFF_S = 1.0  # a loading Redis is polled at least this often: start soon after it is ready
BURST_HORIZON_S = 1.0  # --burst also waits for retries and delayed tasks due this soon
SWEEP_STREAMS = 30  # streams per reaper round looked at beyond those with tasks in flight
CLOCK_ALIGN_S = 10.0  # how often a worker re-measures its host's clock against Redis's


async def cancel_and_wait(tasks: Iterable[asyncio.Task[Any]]) -> None:
    """Cancel tasks and wait until they have ended, cancelling again any that swallowed it.

    Python 3.11's asyncio.wait_for (redis-py's socket writes use it) returns its result instead
    of raising when a cancel lands just as what it waits for completes: a loop cancelled once
    can carry on, and a drain waiting for it would never end.
    """
    tasks = list(tasks)
    pending = {task for task in tasks if not task.done()}
    while pending:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=0.5)
    await asyncio.gather(*tasks, return_exceptions=True)


class Worker:
    def __init__(
        self,
        config: DtqConfig,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 10,
        name: str | None = None,
        burst: bool = False,
        max_tasks: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self.keys = Keys(config.key_prefix)
        self.fixed_queues = list(dict.fromkeys(queues)) if queues else None
        self.concurrency = concurrency
        self.worker_id = name or f"{socket.gethostname()}:{os.getpid()}"
        self.burst = burst
        self.max_tasks = max_tasks
        # Without a clock given, the worker keeps time by Redis's (see _align_clock).
        self.clock = clock or RedisAlignedClock()
        self._aligned_at = float("-inf")
        self.processed = 0
        self.is_leader = False
        self.state = "starting"
        self._running: dict[str, Execution] = {}
        self._unacked: dict[str, Row] = {}
        self._completions: list[Completion] = []
        self._queues: list[str] = []
        # What fetches ask for: None is every queue (the fetch script reads the ready ones, and the
        # idle wait is one shared wake list); with --queues, the fixed queues not paused.
        self._serving: list[str] | None = []
        self._drained = False  # the last fetch left nothing behind: wait for a wake token next
        self._all_streams: list[str] = []
        self._all_stream_set: frozenset[str] = frozenset()
        self._refreshed_at = -1e9
        self._sweep_at = 0  # where in _all_streams the reaper's next round-robin slice starts
        self._stopping = False
        # Heartbeats this worker managed (monotonic): a long gap means every worker's in-flight
        # entries aged meanwhile (Redis frozen or unreachable, or this loop blocked), see _may_reclaim.
        self._last_beat: float | None = None
        self._healthy_since = float("-inf")
        self._stop = asyncio.Event()
        self._beat_failed = False
        self._loading_said = False  # a loading Redis is logged once per outage, not once per loop restart
        self._redis_back = asyncio.Event()  # set (and replaced) by a heartbeat that lands after failing
        self._slot_freed = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._flush_lock = asyncio.Lock()  # held while a batch of completions is being written
        self._loops: dict[str, asyncio.Task[None]] = {}

    # -- lifecycle ----------------------------------------------------------------------------
    def request_stop(self) -> None:
        """Begin a graceful stop: no new work, drain what runs (called from signal handlers)."""
        if not self._stopping:
            logger.info("worker_id=%s stop requested; draining up to %.0fs", self.worker_id,
                        self.config.drain_timeout_s)
        self._stopping = True
        self._stop.set()
        self._slot_freed.set()

    async def run(self) -> int:
        """Run until stopped (or, with burst, until no work is left); return the exit code."""
        read_timeout = BLOCK_MS / 1000 + self.config.redis_timeout_s + 5
        self.client = async_client(self.config, read_timeout_s=read_timeout)
        self.store = WorkerStore(self.config, self.client, self.clock, self.worker_id,
                                 timeout_s=self.config.redis_timeout_s + 5)
        self.pool = ThreadPoolExecutor(max_workers=self.concurrency * 2, thread_name_prefix="dtq-handler")
        self.runner = AttemptRunner(self.config, self.clock, self.pool, self.worker_id,
                                    thread_released=self._slot_freed.set)
        try:
            if not await self._register():
                return 0  # stopped while Redis was still loading: nothing was started
            self.state = "running"
            logger.info("worker_id=%s started queues=%s concurrency=%d", self.worker_id,
                        ",".join(self.fixed_queues or ["*"]), self.concurrency)
            for name, body in (("consume", self._consume), ("flush", self._flush_loop),
                               ("heartbeat", self._heartbeat_loop), ("reaper", self._reaper_loop),
                               ("timeouts", self._timeout_loop),
                               ("cancel-watcher", self._cancel_watch_loop), ("scheduler", self._scheduler_loop)):
                self._loops[name] = asyncio.create_task(self._supervise(name, body), name=f"dtq-{name}")
            await self._stop.wait()
            await self._drain()
        finally:
            await cancel_and_wait(self._loops.values())
            self.pool.shutdown(wait=False, cancel_futures=True)
            await self.store.aclose()
        return 0

    async def _register(self) -> bool:
        """Register, waiting out a Redis that is still loading its dataset (a restart on existing
        data answers LOADING until it is in memory; that ends by itself, so the worker waits rather
        than exits); False when stopped meanwhile. Other errors propagate: at start, an unreachable
        Redis is a wrong URL more often than an outage, and the command says so in one line."""
        delay, waiting_since = 0.1, 0.0
        while True:
            try:
                await self._register_once()
            except redis.exceptions.BusyLoadingError:
                if not waiting_since:
                    waiting_since = time.monotonic()
                    logger.warning("worker_id=%s Redis is loading its dataset into memory; waiting for it "
                                   "before starting", self.worker_id)
                await self._pause(delay)
                if self._stopping:
                    return False
                delay = min(delay * 2, LOADING_BACKOFF_S)
                continue
            if waiting_since:
                logger.info("worker_id=%s Redis finished loading after %.1fs", self.worker_id,
                            time.monotonic() - waiting_since)
            await self._check_eviction_policy()
            return True

    async def _check_eviction_policy(self) -> None:
        """Say loudly, once at start, when Redis may evict dtq's keys (docs/deployment.md)."""
        try:
            policy = await eviction_policy_async(self.client)
        except Exception as exc:  # noqa: BLE001 - a check must not stop the worker
            logger.warning("worker_id=%s could not verify Redis's maxmemory-policy (%s: %s)", self.worker_id,
                           type(exc).__name__, exc)
            return
        problem = eviction_problem(policy)
        if problem is not None:
            # ERROR for a policy that evicts; a WARNING when it could not be read (managed Redis).
            logger.log(logging.ERROR if policy else logging.WARNING, "worker_id=%s %s", self.worker_id, problem)

    async def _register_once(self) -> None:
        await self._align_clock()
        age = await self.store.live_worker_age_s(self.worker_id)
        if age is not None and age < self.config.visibility_timeout_s:
            raise WorkerNameTaken(
                f"worker name {self.worker_id!r} is in use by a live worker (heartbeat {age:.1f}s ago)")
        if self.fixed_queues:
            await self.store.ensure_queues(self.fixed_queues)
        await self.store.register_types(registry.served_types())
        await self.store.heartbeat(self._info(), [])
        self._beat_done()
        self.started_at = self.clock.now_ms()

    def _info(self) -> dict[str, object]:
        return {"queues": ",".join(self.fixed_queues or self._queues), "concurrency": self.concurrency,
                "in_flight": len(self._running) + len(self.runner.abandoned_threads),  # with the drain's threads
                "processed": self.processed, "state": self.state,
                "started_at": getattr(self, "started_at", self.clock.now_ms()),
                "leader": 1 if self.is_leader else 0}

    async def _drain(self) -> None:
        """Stop taking work, let in-flight attempts finish within the drain window, then leave.

        1. The consumer and scheduler stop (the leader lock is handed back).
        2. Running attempts get DTQ_DRAIN_TIMEOUT_S to finish; their completions are flushed.
        3. At the deadline, async handlers are cancelled and sync ones detached, their results
           discarded; their entries stay unacked, for a peer to run the task again.
        4. A detached sync handler cannot be stopped: until its thread ends (at most until its
           handler timeout) heartbeats keep its entry ours, so no peer runs the task beside it.
        5. Heartbeats stop; the entries of attempts that stopped are handed back (a peer's next
           reaper round takes them); the worker deregisters.
        """
        self.state = "draining"
        for name in ("consume", "scheduler"):
            task = self._loops.get(name)
            if task is not None:
                try:
                    await asyncio.wait_for(asyncio.shield(task), timeout=BLOCK_MS / 1000 + 2)
                except (TimeoutError, asyncio.CancelledError):
                    task.cancel()
        if self.is_leader:
            await self._quietly(self.store.release_lock())
            self.is_leader = False
        pending = [ex.task for ex in self._running.values() if ex.task is not None]
        logger.info("worker_id=%s stopped taking work; draining %d attempt(s)", self.worker_id, len(pending))
        abandoned: list[Execution] = []
        if pending:
            done, not_done = await asyncio.wait(pending, timeout=self.config.drain_timeout_s)
            if not_done:
                logger.warning("worker_id=%s drain timeout: abandoning %d attempt(s) to redelivery",
                               self.worker_id, len(not_done))
                abandoned = list(self._running.values())
                for ex in abandoned:
                    ex.abandoned = True
                    if ex.task is not None:
                        ex.task.cancel()
                await asyncio.gather(*not_done, return_exceptions=True)
        flush = self._loops.pop("flush", None)
        if flush is not None:
            # Stop it between writes, never during one: a batch cut off mid-exchange may already
            # have been written, and sent again below it would come back fenced, each of its
            # tasks logged as "result discarded" though it succeeded once.
            async with self._flush_lock:
                await cancel_and_wait([flush])
        if self._completions:
            await self._quietly(self._flush_once())
        await self._outlast_threads()
        # Heartbeats kept in-flight entries fresh through the drain; stop them now, because one
        # landing after the deregistration would re-register a worker that is gone.
        await cancel_and_wait([self._loops.pop(name) for name in ("heartbeat", "reaper", "cancel-watcher", "timeouts")
                               if name in self._loops])
        # Only now, with no heartbeat left to refresh them again; a thread still running (past
        # its timeout) keeps its entry until this process is gone.
        running = {ex.row.entry_id for ex in self.runner.abandoned_threads.values()}
        await self._quietly(self.store.release([ex.row for ex in abandoned if ex.row.entry_id not in running]))
        await self._quietly(self.store.deregister())
        self.state = "stopped"
        logger.info("worker_id=%s stopped processed=%d", self.worker_id, self.processed)

    async def _outlast_threads(self) -> None:
        """Wait for the sync handlers the drain detached, at most until their handler timeout.

        A thread cannot be stopped, and exiting would cut it off mid-way; while it runs, the
        heartbeat loop keeps refreshing its entry (see _heartbeat_loop), so no peer starts the
        task's next attempt beside it. Its result is discarded all the same.
        """
        threads = self.runner.abandoned_threads
        if not threads:
            return
        logger.warning("worker_id=%s %d sync handler(s) still running in their thread(s): keeping their entries "
                       "until they finish, at most until their handler timeout (results discarded); signal again "
                       "to exit now", self.worker_id, len(threads))
        deadline = max(ex.deadline for ex in threads.values())
        while threads and (left_s := deadline - time.monotonic()) > 0:
            await asyncio.wait(list(threads), timeout=left_s, return_when=asyncio.FIRST_COMPLETED)
        if threads:
            logger.warning("worker_id=%s %d detached sync handler(s) past their timeout: exiting without them",
                           self.worker_id, len(threads))
        else:
            logger.info("worker_id=%s detached sync handlers finished", self.worker_id)

    async def _quietly(self, awaitable: Awaitable[object]) -> None:
        try:
            await awaitable
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            logger.warning("worker_id=%s shutdown step failed: %s", self.worker_id, exc)

    async def _supervise(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run a loop; on error log, back off exponentially (capped) and restart it, at once when a
        heartbeat lands again after failing (Redis is back: no loop waits out a long backoff)."""
        # Heartbeats retry at their own pace at most: after an outage, peers wait for them.
        max_backoff = self._beat_every_s() if name == "heartbeat" else MAX_BACKOFF_S
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the supervisor's job
                if time.monotonic() - started > 30:
                    failures = 0
                failures += 1
                delay = min(max_backoff, 0.1 * 2 ** min(failures, 10))
                if isinstance(exc, redis.exceptions.BusyLoadingError):
                    # Every loop fails this way, over and over, for as long as the load takes.
                    if not self._loading_said:
                        self._loading_said = True
                        logger.warning("worker_id=%s Redis is loading its dataset into memory; every loop retries "
                                       "with backoff until it has", self.worker_id)
                    logger.debug("worker_id=%s loop=%s: Redis still loading; restarting in %.1fs", self.worker_id,
                                 name, delay)
                else:
                    logger.warning("worker_id=%s loop=%s failed (%s: %s); restarting in %.1fs", self.worker_id,
                                   name, type(exc).__name__, exc, delay)
                if name == "heartbeat":
                    self._beat_failed = True
                    await asyncio.sleep(delay)
                    continue
                recovered = self._redis_back
                try:
                    await asyncio.wait_for(recovered.wait(), timeout=delay)
                    failures = 0  # Redis answers again: start the backoff afresh
                except TimeoutError:
                    pass

    async def _pause(self, seconds: float) -> None:
        """Sleep, waking early when a stop is requested."""
        try:
            await asyncio.wait_for(self._stop.wait(), timeout=seconds)
        except TimeoutError:
            pass

    # -- consumption --------------------------------------------------------------------------
    def _free_slots(self) -> int:
        return self.concurrency - len(self._running) - self.runner.detached_threads

    async def _refresh_queues(self, force: bool = False) -> None:
        if not force and time.monotonic() - self._refreshed_at < QUEUE_REFRESH_S:
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
        self._refreshed_at = time.monotonic()

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

    def _start(self, row: Row) -> None:
        ex = Execution(row)
        self._running[row.entry_id] = ex
        ex.task = asyncio.get_running_loop().create_task(self._execute(ex))

    async def _execute(self, ex: Execution) -> None:
        completion: Completion | None = None
        try:
            if time.monotonic() - ex.row.received_at > self._stale_start_s():
                try:
                    ours = await self._still_ours(ex.row)
                except asyncio.CancelledError:
                    if not ex.cancel_requested:
                        raise  # the drain abandoned it: its entry is left for a peer
                    completion = Completion(ex.row, Outcome.CANCELLED)  # fenced if it is no longer ours
                    return
                if not ours:
                    return
            completion = await self.runner.run(ex)
        finally:
            self._running.pop(ex.row.entry_id, None)
            if completion is not None:
                self._unacked[ex.row.entry_id] = ex.row
                self._completions.append(completion)
                self._flush_wanted.set()
            self._slot_freed.set()

    def _stale_start_s(self) -> float:
        """A claim older than this when its handler is about to start is checked first."""
        return min(1.0, self.config.visibility_timeout_s / 2)

    async def _still_ours(self, row: Row) -> bool:
        """Re-check a claim this worker sat on (its process stalled, or its loop was blocked):
        meanwhile a peer may have reclaimed the entry and run, finished or cancelled the task."""
        try:
            ours = await self.store.claim_still_ours(row)
        except Exception as exc:  # noqa: BLE001 - cannot tell: run it (skipping would cost it an attempt)
            logger.warning("task_id=%s worker_id=%s attempt=%d claim held %.1fs could not be checked (%s); "
                           "running it (its completion is fenced if a peer took it over)", row.task_id,
                           self.worker_id, row.attempt, time.monotonic() - row.received_at, exc)
            return True
        if not ours:
            logger.warning("task_id=%s worker_id=%s attempt=%d was claimed %.1fs ago and has since been taken "
                           "over (reclaimed, finished or cancelled by a peer); not running it", row.task_id,
                           self.worker_id, row.attempt, time.monotonic() - row.received_at)
        return ours

    # -- completion ---------------------------------------------------------------------------
    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            await self._flush_once()

    async def _flush_once(self) -> None:
        async with self._flush_lock:
            batch, self._completions = self._completions, []
            if not batch:
                return
            try:
                statuses = await self.store.complete(batch)
            except BaseException:
                self._completions[:0] = batch  # keep them; the entries stay pending until written
                self._flush_wanted.set()
                raise
            faults.reach(self.config.test_fault, "after_complete")
            for completion, status in zip(batch, statuses, strict=True):
                self._unacked.pop(completion.row.entry_id, None)
                if isinstance(status, list):  # ["quarantined", new status, reason]: its record is corrupt
                    logger.error("task_id=%s queue=%s attempt=%d worker_id=%s quarantined as dtq.CorruptRecord "
                                 "(%s): %s", completion.row.task_id, completion.row.queue, completion.row.attempt,
                                 self.worker_id, status[1] or "task record unwritable", status[2])
                elif status == "resent":
                    logger.info("task_id=%s attempt=%d worker_id=%s completion re-sent after a lost reply: already "
                                "recorded", completion.row.task_id, completion.row.attempt, self.worker_id)
                elif status == "fenced":
                    logger.warning("task_id=%s attempt=%d worker_id=%s result discarded: a newer attempt owns it",
                                   completion.row.task_id, completion.row.attempt, self.worker_id)
                elif status in ("DEAD_LETTERED", "FAILED"):
                    # The one place a handler failure ends the task: say where it went and why.
                    logger.warning("task_id=%s queue=%s attempt=%d worker_id=%s %s: %s: %s",
                                   completion.row.task_id, completion.row.queue, completion.row.attempt,
                                   self.worker_id, "moved to the DLQ" if status == "DEAD_LETTERED" else "failed",
                                   completion.error_class, completion.error_message[:200])
            self.processed += len(batch)
            if self.max_tasks is not None and self.processed >= self.max_tasks:
                self.request_stop()

    # -- heartbeat, reaper, cancel watcher ----------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:  # beat first: restarted after a failure (see _supervise), it beats at once
            entries = [(r.stream, r.entry_id, r.task_id) for r in self._unacked.values()]
            entries += [(ex.row.stream, ex.row.entry_id, ex.row.task_id) for ex in self._running.values()]
            # Sync handlers the drain detached still run: their entries stay ours until they end.
            entries += [(ex.row.stream, ex.row.entry_id, ex.row.task_id)
                        for ex in self.runner.abandoned_threads.values()]
            await self._align_clock()
            await self.store.heartbeat(self._info(), entries)
            self._beat_done()
            if self._beat_failed:
                # Wake every loop backing off after an error: this beat says Redis answers again.
                self._beat_failed = False
                self._loading_said = False
                recovered, self._redis_back = self._redis_back, asyncio.Event()
                recovered.set()
            await asyncio.sleep(self._beat_every_s())

    async def _align_clock(self) -> None:
        """Measure this host's clock against Redis's. Every worker writing and comparing times on
        Redis's clock keeps a host whose clock is off from promoting delayed tasks and retries
        early or late, expiring tasks early, or making its peers (or itself) look stale."""
        clock = self.clock
        if not isinstance(clock, RedisAlignedClock):
            return  # a clock given by the caller (tests) is kept as it is
        if time.monotonic() - self._aligned_at < CLOCK_ALIGN_S:
            return  # clocks drift slowly: a heartbeat stays one round trip in between
        sent = clock.system_ms()
        seconds, micros = await self.client.time()
        received = clock.system_ms()
        if received - sent > 1000:
            return  # a reading that slow says little
        self._aligned_at = time.monotonic()
        if clock.align(sent, int(seconds) * 1000 + int(micros) // 1000, received) and abs(clock.offset_ms) > 1000:
            logger.warning("worker_id=%s this host's clock is %+.1fs off Redis's; keeping time by Redis's "
                           "(run NTP on every host)", self.worker_id, -clock.offset_ms / 1000)

    def _beat_every_s(self) -> float:
        return self.config.heartbeat_every_s  # see DtqConfig.heartbeat_every_s and _beat_gap_s

    def _beat_gap_s(self) -> float:
        """Longer than this between two heartbeats is a gap.

        With beats every h, an owner's entries are at most F + h old when a freeze of F ends, and
        reclaimable once that passes v: the gap threshold must stay at or under v - h (here at
        most v / 2, as h <= v / 3), and above h by enough to absorb a late beat.
        """
        h, v = self._beat_every_s(), self.config.visibility_timeout_s
        return h + min(max(1.0, h), (v - 2 * h) / 2)

    def _beat_done(self) -> None:
        now = time.monotonic()
        if self._last_beat is not None and now - self._last_beat > self._beat_gap_s():
            self._healthy_since = now
            logger.warning("worker_id=%s heartbeats resumed after %.1fs without one (Redis frozen or unreachable, "
                           "or this event loop blocked); reclaiming nothing for %.0fs so that live workers refresh "
                           "their entries first", self.worker_id, now - self._last_beat,
                           self.config.visibility_timeout_s)
        self._last_beat = now

    def _may_reclaim(self) -> bool:
        """Whether an entry idle past the visibility timeout now means its owner is gone.

        While heartbeats cannot be written (Redis frozen or unreachable), every worker's entries
        age together; right after, the reaper that reconnects first would take the entries of
        workers that are alive and still running them, and run those tasks a second time. So a
        reaper reclaims only while its own heartbeats are on time, and only a visibility timeout
        after they resumed from a gap: live owners have refreshed their entries by then.
        """
        now = time.monotonic()
        return (self._last_beat is not None and now - self._last_beat <= self._beat_gap_s()
                and now - self._healthy_since >= self.config.visibility_timeout_s)

    async def _reaper_loop(self) -> None:
        interval = max(0.2, min(self.config.visibility_timeout_s / 4, 5.0))
        last_prune = 0.0
        while not self._stopping:
            await self._pause(interval)
            if self._stopping:
                return
            free = self._free_slots()
            if free > 0 and self._may_reclaim():  # a draining worker takes no reclaimed work either
                rows = await self.store.reclaim(await self._reap_streams(), free,
                                                ours=self._running.keys() | self._unacked.keys(),
                                                trusted=lambda took_s: took_s <= self._beat_gap_s()
                                                and self._may_reclaim())
                for row in rows:
                    logger.info("task_id=%s attempt=%d worker_id=%s reclaimed after visibility timeout",
                                row.task_id, row.attempt, self.worker_id)
                    self._start(row)
            if self.store.deleted_seen:
                logger.warning("worker_id=%s %d pending entr(ies) were deleted from their stream; the leader's "
                               "lost-task sweep requeues their tasks", self.worker_id, self.store.deleted_seen)
                self.store.deleted_seen = 0
            if time.monotonic() - last_prune > 30:
                last_prune = time.monotonic()
                await self.store.prune_workers(max(300.0, self.config.visibility_timeout_s * 10))

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

    async def _timeout_loop(self) -> None:
        while True:
            await asyncio.sleep(TIMEOUT_CHECK_S)
            if self._running:
                expire_overdue(list(self._running.values()), time.monotonic())

    async def _cancel_watch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.cancel_poll_s)
            running = [ex for ex in self._running.values() if not ex.cancel_requested]
            if not running:
                continue
            flags = await self.store.cancel_flags([ex.row.task_id for ex in running])
            for ex, flag in zip(running, flags, strict=True):
                if flag and ex.task is not None and not ex.task.done():
                    logger.info("task_id=%s worker_id=%s cancelling on request", ex.row.task_id, self.worker_id)
                    ex.cancel_requested = True
                    ex.task.cancel()

    # -- scheduler ----------------------------------------------------------------------------
    async def _scheduler_loop(self) -> None:
        last_stale_check = last_sweep = 0.0
        sweep_every = max(0.5, min(self.config.visibility_timeout_s / 2, 5.0))
        while not self._stopping:
            leader = await self.store.acquire_or_renew_lock(self.is_leader)
            if leader != self.is_leader:
                logger.info("worker_id=%s %s scheduler leadership", self.worker_id,
                            "took" if leader else "lost")
                self.is_leader = leader
            if leader:
                while await self.store.promote_due() >= 500:
                    pass
                if time.monotonic() - last_stale_check > min(5.0, self.config.stale_claim_s / 2):
                    last_stale_check = time.monotonic()
                    returned = await self.store.requeue_stale_claims()
                    if returned > 0:
                        logger.warning("worker_id=%s returned %d stale scheduler claim(s) to the schedule",
                                       self.worker_id, returned)
                if time.monotonic() - last_sweep > sweep_every:
                    last_sweep = time.monotonic()
                    recovered = await self.store.recover_lost_tasks()
                    if recovered > 0:
                        logger.warning("worker_id=%s requeued %d running task(s) whose stream entry was lost",
                                       self.worker_id, recovered)
            await self._pause(self.config.scheduler_interval_s)
