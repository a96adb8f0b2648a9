"""The worker process: consumption (fetch.py), execution, completion, heartbeats (liveness.py),
the visibility reaper (reclaim.py), the cancel watcher and candidacy for scheduler leadership
(leader.py), each a supervised asyncio loop; this module starts, supervises and drains them.

Hot path per batch: one fetchTasks call per ready partition (fetch.py), the handlers (async
ones as Tasks on this loop, executor.py; sync ones in `concurrency` handler threads that hand
their outcomes back in batches and start the next backlog row themselves, threads.py), one
completeTasks call per partition for everything that finished meanwhile (state, result, XACK,
event); the calls of each step go out in one write per Redis node.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any

import redis

from .. import registry
from ..clock import Clock, RedisAlignedClock
from ..config import DtqConfig
from ..connection import async_client, eviction_policy_async, eviction_problem
from ..engine import Engine
from ..engine.periodic import PeriodicSpec
from ..errors import WorkerNameTaken
from ..keys import Keys
from . import affinity
from .execution import ExecutionLoops
from .executor import AttemptRunner, Completion, Execution, Row, abandon
from .fetch import BLOCK_MS, FetchLoop
from .leader import LeaderLoop
from .liveness import HeartbeatLoop, Liveness
from .progress import ProgressReporter
from .reclaim import ReaperLoop
from .resources import CpuMeter, rss_bytes
from .store import Partition, WorkerStore
from .threads import HandlerThreads
from .turnover import Turnover
from .wake import WakeSubscription

logger = logging.getLogger("dtq.worker")

MAX_BACKOFF_S = 10.0
LOADING_BACKOFF_S = 1.0  # a loading Redis is polled at least this often: start soon after it is ready


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


def drain_signals() -> list[signal.Signals]:
    """The signals that drain the worker (Worker.serve): SIGTERM, SIGINT, and SIGHUP unless the
    process was started ignoring it (nohup)."""
    signals = [signal.SIGTERM, signal.SIGINT]
    if signal.getsignal(signal.SIGHUP) is not signal.SIG_IGN:
        signals.append(signal.SIGHUP)
    return signals


class Worker(FetchLoop, ExecutionLoops, HeartbeatLoop, ReaperLoop, LeaderLoop):
    """One worker process. Each loop lives in the module of the failure modes it handles (the
    mixins: fetch, execution, liveness, reclaim, leader); this class holds the state they share,
    and starts, supervises and drains them."""

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
        periodic: Sequence[PeriodicSpec] | None = None,
        queue_limits: Mapping[str, Any] | None = None,
    ) -> None:
        """periodic: the schedules declared in code, synced at start (None: no sync; an empty
        list retires the declared schedules of the types this worker serves)."""
        self.config = config
        self.periodic = None if periodic is None else list(periodic)
        # DTQ_QUEUE_LIMITS, synced at start (None: the setting is absent, nothing is synced).
        self.queue_limits = None if queue_limits is None else dict(queue_limits)
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
        # Claimed rows waiting for a slot (fetch.py's prefetch; handler threads take sync ones).
        self._backlog: deque[Row] = deque()
        # Claimed rows that must not start (a drain's backlog, a backlog row cancelled meanwhile),
        # on their way back to their streams (returnEntries): heartbeated until they are back.
        self._withheld: list[Row] = []
        # Partitions whose limits count starts in a time window (rate, group_rate): as their
        # fetches say (fetch.py). Their claims are starts: nothing is claimed ahead while one is ready.
        self._rated: set[str] = set()
        self._turnover = Turnover()
        self._completions: list[Completion] = []
        self._queues: list[str] = []
        # The partitions served (tag -> Partition): every one of the served queues, for the reaper
        # and burst mode; the fetchable ones are those of queues not paused.
        self._served: dict[str, Partition] = {}
        self._fetchable: dict[str, Partition] = {}
        self._paused_queues: set[str] = set()
        self._retry_tags: set[str] = set()  # partitions whose fetch failed: ready again at the next refresh
        self._fetch_errors: dict[str, str] = {}  # the last error of each, logged once
        self._limit_timers: dict[str, asyncio.TimerHandle] = {}  # partitions a rate limit holds back (fetch.py)
        self._fetch_offset = 0  # rotates which ready partitions get the remainder of the free slots
        self._list_wait_off_until = 0.0  # monotonic: no wait on a wake list before (fetch.py)
        self._list_waited: str | None = None  # the partition of the last wait on a wake list
        self._refreshed_at = -1e9
        self._sweep_at = 0  # where in the served partitions the reaper's next round-robin slices start
        self._running_sweep_at = 0
        self._stopping = False
        self.quiet = False
        self._cpu_meter = CpuMeter()
        self.liveness = Liveness(config, self.clock, self.worker_id)
        self._stop = asyncio.Event()
        self._beat_failed = False
        self._loading_said = False  # a loading Redis is logged once per outage, not once per loop restart
        self._redis_back = asyncio.Event()  # set (and replaced) by a heartbeat that lands after failing
        self._slot_freed = asyncio.Event()
        self._flush_wanted = asyncio.Event()
        self._flush_lock = asyncio.Lock()  # held while a batch of completions is being written
        self._samples_lock = asyncio.Lock()  # held while the statistics' samples are being written
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
        if hasattr(self, "wake"):
            self.wake.poke()  # an idle consumer waiting for a wake-up stops waiting

    async def serve(self) -> int:
        """run() as a process's main task: SIGTERM, SIGINT and SIGHUP drain (request_stop); a second
        SIGTERM or SIGINT exits at once, leaving what runs to redelivery.

        SIGHUP is a terminal hanging up (an ssh session dropped under a worker started by hand):
        its default would kill the process mid-task, as SIGKILL does. It never counts as the
        second signal, since a hangup often comes twice (from the shell, then the kernel), and it
        is left alone where it is ignored (nohup): that process asked to outlive its terminal.
        """
        loop = asyncio.get_running_loop()
        signals_seen = 0

        def on_signal(signum: int) -> None:
            nonlocal signals_seen
            if signum == signal.SIGHUP and self._stopping:
                return  # the hangup's echo: already draining
            signals_seen += 1
            if signals_seen > 1:
                logger.warning("worker_id=%s second signal: exiting now", self.worker_id)
                os._exit(1)
            logger.info("worker_id=%s got %s", self.worker_id, signal.Signals(signum).name)
            self.request_stop()

        for signum in drain_signals():
            loop.add_signal_handler(signum, on_signal, signum)
        return await self.run()

    async def run(self) -> int:
        """Run until stopped (or, with burst, until no work is left); return the exit code."""
        read_timeout = BLOCK_MS / 1000 + self.config.redis_timeout_s + 5
        self.client = async_client(self.config, read_timeout_s=read_timeout)
        self.store = WorkerStore(self.config, self.client, self.clock, self.worker_id,
                                 timeout_s=self.config.redis_timeout_s + 5)
        self.wake = WakeSubscription(self.client, self.keys.wake(), self.worker_id)
        self.runner = AttemptRunner(self.config, self.clock, self.worker_id)
        self.progress = self.runner.progress = ProgressReporter(self.store, self.clock,
                                                                self.config.progress_min_interval_s)
        # A detached thread's end frees its slot: the consumer (or the drain) may be waiting for it.
        self.threads = HandlerThreads(self.concurrency, self.runner, deliver=self._finished,
                                      released=self._thread_released, take_next=self._take_next)
        try:
            if not await self._register():
                return 0  # stopped while Redis was still loading: nothing was started
            self.state = "running"
            self.wake.start()
            logger.info("worker_id=%s started queues=%s concurrency=%d", self.worker_id,
                        ",".join(self.fixed_queues or ["*"]), self.concurrency)
            for name, body in (("consume", self._consume), ("flush", self._flush_loop),
                               ("samples", self._samples_loop),
                               ("heartbeat", self._heartbeat_loop), ("reaper", self._reaper_loop),
                               ("timeouts", self._timeout_loop),
                               ("cancel-watcher", self._cancel_watch_loop), ("scheduler", self._scheduler_loop),
                               ("progress", self.progress.run)):
                self._loops[name] = asyncio.create_task(self._supervise(name, body), name=f"dtq-{name}")
            self._keep_cpus()
            await self._stop.wait()
            await self._drain()
        finally:
            await cancel_and_wait(self._loops.values())
            self.threads.close()
            await self.wake.close()
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
                    waiting_since = self.clock.monotonic()
                    logger.warning("worker_id=%s Redis is loading its dataset into memory; waiting for it "
                                   "before starting", self.worker_id)
                await self._pause(delay)
                if self._stopping:
                    return False
                delay = min(delay * 2, LOADING_BACKOFF_S)
                continue
            if waiting_since:
                logger.info("worker_id=%s Redis finished loading after %.1fs", self.worker_id,
                            self.clock.monotonic() - waiting_since)
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
        if self.periodic is not None:
            await self._sync_periodic(self.periodic)
        if self.queue_limits is not None:
            await self._sync_limits(self.queue_limits)
        await self.store.heartbeat(self._info(), [])
        self.liveness.beat_done()
        self.started_at = self.clock.now_ms()

    async def _sync_periodic(self, specs: list[PeriodicSpec]) -> None:
        """Make Redis hold the schedules declared in code (engine.periodic.sync_declared), once at
        start; the engine's blocking client, in a thread, for this one call."""
        engine = Engine(self.config, clock=self.clock)
        try:
            report = await asyncio.to_thread(engine.periodic.sync_declared, specs,
                                             served_types=frozenset(registry.served_types()))
        finally:
            engine.client.close()
        changes = {k: v for k, v in report.items() if v and k != "unchanged"}
        logger.info("worker_id=%s periodic schedules synced: %d declared%s", self.worker_id, len(specs),
                    "".join(f"; {k}: {', '.join(v)}" for k, v in changes.items()))

    async def _sync_limits(self, declared: dict[str, Any]) -> None:
        """Apply DTQ_QUEUE_LIMITS (engine.limits.sync_declared), once at start."""
        engine = Engine(self.config, clock=self.clock)
        try:
            report = await asyncio.to_thread(engine.limits.sync_declared, declared)
        finally:
            engine.client.close()
        changes = {k: v for k, v in report.items() if v and k != "unchanged"}
        logger.info("worker_id=%s queue limits synced: %d declared%s", self.worker_id, len(declared),
                    "".join(f"; {k}: {', '.join(v)}" for k, v in changes.items()))

    def _in_flight_rows(self) -> list[Row]:
        """The rows whose entries are this worker's: completing, running, and run by the sync
        handlers the drain detached (their entries stay ours until they end)."""
        rows = list(self._unacked.values()) + list(self._backlog) + self._withheld
        rows += [ex.row for ex in self._running.values()]
        rows += [ex.row for ex in self.threads.abandoned.values()]
        return rows

    def _info(self) -> dict[str, object]:
        # partitions: where this worker holds entries now, so that peers' reapers look there as
        # soon as it falls silent (reclaim.py), however many partitions exist.
        partitions = sorted({row.partition_tag for row in self._in_flight_rows()})
        cpu, cpu_share = self._cpu_meter.read()
        return {"queues": ",".join(self.fixed_queues or self._queues), "concurrency": self.concurrency,
                "partitions": ",".join(partitions),
                "in_flight": len(self._running) + len(self.threads.abandoned),  # with the drain's threads
                "processed": self.processed, "state": self.state,
                "rss_bytes": rss_bytes(), "cpu_s": f"{cpu:.2f}", "cpu_percent": f"{cpu_share:.1f}",
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
        # Claimed rows not started yet go back to their streams, uncharged, now: held through the
        # drain, they would wait past the visibility timeout for a peer to reclaim them, charged.
        # Until they are back (Redis away), heartbeats keep them ours and the cancel watcher
        # tries again at each of its polls; what is left at the end is tried once more below.
        self._withheld += self._take_backlog()
        logger.info("worker_id=%s stopped taking work; draining %d attempt(s), handing back %d not started",
                    self.worker_id, len(self._running), len(self._withheld))
        await self._quietly(self._return_withheld("stop"))
        abandoned: list[Execution] = []
        await self._wait_slots(lambda: not self._running, self.clock.monotonic() + self.config.drain_timeout_s)
        if self._running:
            logger.warning("worker_id=%s drain timeout: abandoning %d attempt(s) to redelivery",
                           self.worker_id, len(self._running))
            abandoned = list(self._running.values())
            tasks = [ex.task for ex in abandoned if ex.task is not None and not ex.task.done()]
            for ex in abandoned:
                abandon(ex)
            await asyncio.gather(*tasks, return_exceptions=True)
        flush = self._loops.pop("flush", None)
        if flush is not None:
            # Stop it between writes, never during one: a batch cut off mid-exchange may already
            # have been written, and sent again below it would come back fenced, each of its
            # tasks logged as "result discarded" though it succeeded once.
            async with self._flush_lock:
                await cancel_and_wait([flush])
        if self._completions:
            await self._quietly(self._flush_once())
        samples = self._loops.pop("samples", None)
        if samples is not None:
            async with self._samples_lock:  # as the flush: never cut a write off mid-exchange
                await cancel_and_wait([samples])
        await self._quietly(self.store.write_all_samples())
        await self._outlast_threads()
        # Heartbeats kept in-flight entries fresh through the drain; stop them now, because one
        # landing after the deregistration would re-register a worker that is gone.
        await cancel_and_wait([self._loops.pop(name) for name in ("heartbeat", "reaper", "cancel-watcher", "timeouts")
                               if name in self._loops])
        # Only now, with no heartbeat left to refresh them again; a thread still running (past
        # its timeout) keeps its entry until this process is gone.
        running = set(self.threads.abandoned)
        self._withheld += self._take_backlog()  # one a handler thread put back as the drain began
        await self._quietly(self.store.release([ex.row for ex in abandoned if ex.row.entry_id not in running]))
        await self._quietly(self._return_withheld("stop"))
        await self._quietly(self.store.deregister())
        self.state = "stopped"
        logger.info("worker_id=%s stopped processed=%d", self.worker_id, self.processed)

    async def _outlast_threads(self) -> None:
        """Wait for the sync handlers the drain detached, at most until their handler timeout.

        A thread cannot be stopped, and exiting would cut it off mid-way; while it runs, the
        heartbeat loop keeps refreshing its entry (see _heartbeat_loop), so no peer starts the
        task's next attempt beside it. Its result is discarded all the same.
        """
        threads = self.threads.abandoned
        if not threads:
            return
        logger.warning("worker_id=%s %d sync handler(s) still running in their thread(s): keeping their entries "
                       "until they finish, at most until their handler timeout (results discarded); signal again "
                       "to exit now", self.worker_id, len(threads))
        await self._wait_slots(lambda: not threads, max(ex.deadline for ex in threads.values()))
        if threads:
            logger.warning("worker_id=%s %d detached sync handler(s) past their timeout: exiting without them",
                           self.worker_id, len(threads))
        else:
            logger.info("worker_id=%s detached sync handlers finished", self.worker_id)

    def _take_backlog(self) -> list[Row]:
        rows = []
        while self._backlog:
            try:
                rows.append(self._backlog.popleft())
            except IndexError:
                break
        return rows

    async def _wait_slots(self, done: Callable[[], bool], deadline: float) -> None:
        """Wait until done() holds or the clock.monotonic() deadline passes, looking again each
        time an attempt ends or a detached thread does (both set _slot_freed)."""
        while True:
            self._slot_freed.clear()
            if done() or (left_s := deadline - self.clock.monotonic()) <= 0:
                return
            try:
                async with asyncio.timeout(left_s):
                    await self._slot_freed.wait()
            except TimeoutError:
                pass

    async def _quietly(self, awaitable: Awaitable[object]) -> None:
        try:
            await awaitable
        except Exception as exc:  # noqa: BLE001 - best effort on the way out
            logger.warning("worker_id=%s shutdown step failed: %s", self.worker_id, exc)

    def _keep_cpus(self) -> None:
        """DTQ_WORKER_CPU_AFFINITY=auto: the threads of a worker of short sync handlers on one CPU
        at a time (dtq_core/worker/affinity.py)."""
        if self.config.worker_cpu_affinity != "auto" or not affinity.available():
            return
        allowed = os.sched_getaffinity(0)
        if len(allowed) < 2:
            return
        try:
            keeper = affinity.Keeper(self.worker_id, allowed, sync_started=lambda: self.threads.started,
                                     ended=lambda: self.processed, running_for=self._longest_sync_attempt_s)
        except (OSError, ValueError) as exc:  # a /proc without the per-CPU lines it needs
            logger.warning("worker_id=%s DTQ_WORKER_CPU_AFFINITY=auto: cannot read CPU use (%s); threads left to "
                           "the OS", self.worker_id, exc)
            return
        self.threads.on_start = keeper.wake
        self._loops["affinity"] = asyncio.create_task(self._supervise("affinity", lambda: affinity.keep(keeper)),
                                                      name="dtq-affinity")

    def _longest_sync_attempt_s(self) -> float:
        """How long the longest-running sync attempt has run, in seconds (0: none runs). A
        detached handler (one the worker gave up on, still running in its thread) is long."""
        if self.threads.detached or self.threads.abandoned:
            return float("inf")
        now = time.perf_counter()
        return max((now - ex.started for ex in self._running.values() if ex.in_thread and ex.started), default=0.0)

    async def _supervise(self, name: str, body: Callable[[], Awaitable[None]]) -> None:
        """Run a loop; on error log, back off exponentially (capped) and restart it, at once when a
        heartbeat lands again after failing (Redis is back: no loop waits out a long backoff)."""
        # Heartbeats retry at their own pace at most: after an outage, peers wait for them.
        max_backoff = self.config.heartbeat_every_s if name == "heartbeat" else MAX_BACKOFF_S
        failures = 0
        while True:
            started = self.clock.monotonic()
            try:
                await body()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the supervisor's job
                if self.clock.monotonic() - started > 30:
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

    def _free_slots(self) -> int:
        return self.concurrency - len(self._running) - self.threads.detached
