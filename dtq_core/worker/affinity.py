"""Keep a worker's handler threads on one CPU at a time (DTQ_WORKER_CPU_AFFINITY=auto, Linux).

Why: only one thread of a process runs Python at a time (the GIL). When handler threads do short
I/O (a Redis call, an ORM query) on several cores, each release of the GIL around a system call
wakes a thread on another core, which takes the GIL while the releasing thread returns from its
call and must now sleep: measured on a 2-core VM, 10 threads doing one redis-py INCR each spend
94-100 µs of CPU per call instead of 40 on one core, and a worker of sync handlers drains 1.4-1.7x
faster with its threads on one core (docs/performance.md, "Issue 20 goal 2: one CPU for a
worker's threads"). On one core the releasing thread keeps running through its call and takes
the GIL back before the woken one is even scheduled. An idle worker gains too: the loop thread
hands a task over and goes back to its wait before the handler thread runs, so neither waits
for the other's GIL, and a task reaches its body's first I/O sooner (docs/performance.md, "Issue
20 goal 5: the pin for sporadic tasks").

When it applies, decided as the first sync handler starts (Keeper.first_sync) and re-decided
every TICK_S (Keeper.tick):
- only once sync handlers have run (handler threads exist), and only while no attempt has run
  LONG_S or longer (nor did for LONG_HOLD_S): a worker whose tasks run long gains nothing from
  the pin, and keeps every CPU for what its handlers start. Idle, the threads stay pinned, ready
  for the next short task;
- never when the threads used more than PARALLEL CPUs while free to use them all: handlers that
  release the GIL for long stretches of C code (hashing, compression, numpy) run in parallel,
  and the worker leaves them every CPU for HOLD_S before it looks again;
- on the least busy CPU the process may use (taskset, a cpuset), moved off a CPU that other
  processes crowd; every PROBE_S (jittered; deferred while no attempt ends) the threads run one
  tick on all CPUs again so that the measure above stays current, and EARLY_PROBE_S after a pin no measure backs (the
  first sync handler's; the first busy tick after IDLE_S idle): a pinned process cannot show
  that its handlers would use more than one CPU.
A program a handler starts inherits the CPU of the thread that starts it: every tick, after a
move, and when the threads let go, the worker's child processes (and theirs) still on exactly
the pinned CPU get every CPU back (free_descendants), so a program started by a pinned thread is
confined for at most one tick. Not seen (docs/tasks.md says so): a program that chose exactly
that CPU itself (widened too), one detached from the worker (reparented to PID 1: it keeps the
CPU), an embedding program's threads' own CPU sets (they get the worker's), and a worker narrowed
by hand while it runs (its next unpin spreads it over the CPUs it started with).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from .resources import CpuMeter

logger = logging.getLogger("dtq.worker")

TICK_S = 0.25
LONG_S = 0.1  # an attempt running this long makes the worker's attempts long: every CPU for them
LONG_HOLD_S = 5.0  # how long after the last long attempt the threads stay on every CPU
PARALLEL = 1.15  # CPUs the process used at once while free to: its handlers run C code in parallel
HOLD_S = 30.0  # how long such a worker is left on every CPU before it looks again
PROBE_S = 30.0  # how often a pinned worker runs a tick unpinned, to measure the above
# The first probe after a pin that no measure backs (the first sync handler, a busy spell after
# an idle one): handlers that run C code in parallel are found within seconds, not PROBE_S. Not
# sooner: a probe's tick unpinned cost a drain of 20,000 short sync tasks (2-3 s) about 10 % at 1 s.
EARLY_PROBE_S = 5.0
IDLE_S = 5.0  # a worker that ended no attempt for this long is idle: what it runs next is not known
CROWDED = 0.5  # of a CPU used by other processes on ours: move when another CPU is this much freer
TIE = 0.2  # CPUs this close to the least busy one are as good


def available() -> bool:
    """Whether this platform lets a process choose its CPUs (Linux)."""
    return hasattr(os, "sched_setaffinity") and os.path.isdir("/proc/self/task")


def cpu_busy() -> dict[int, float]:
    """Per CPU, the seconds it has spent busy since boot (/proc/stat: all but idle and iowait)."""
    ticks = os.sysconf("SC_CLK_TCK")
    busy: dict[int, float] = {}
    with open("/proc/stat") as f:
        for line in f:
            if not line.startswith("cpu") or line.startswith("cpu "):
                continue
            name, *fields = line.split()
            values = [int(v) for v in fields[:8]]
            busy[int(name[3:])] = (sum(values) - values[3] - values[4]) / ticks
    return busy


def set_threads(cpus: set[int], *, passes: int = 100) -> None:
    """Every thread of this process on `cpus` (threads started later inherit their starter's).
    Listed again until a listing shows no new thread off `cpus`: a thread not set yet may start
    one while the others are being set (the GIL is let go between them), and that one would keep
    the old CPUs."""
    done: set[str] = set()
    for _ in range(passes):
        tids = set(os.listdir("/proc/self/task")) - done
        changed = False
        for tid in tids:
            try:
                if os.sched_getaffinity(int(tid)) != cpus:
                    os.sched_setaffinity(int(tid), cpus)
                    changed = True
            except (OSError, ValueError):  # the thread ended meanwhile
                continue
        if not changed:
            return
        done |= tids


def children(pid: int) -> list[int]:
    """The processes that `pid`'s threads started and that still run (/proc/<pid>/task/*/children)."""
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:  # it ended
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                kids += [int(child) for child in f.read().split()]
        except OSError:  # the thread ended, or a kernel without CONFIG_PROC_CHILDREN
            continue
    return kids


def free_descendants(cpu: int, allowed: set[int], *, most: int = 1000) -> int:
    """Give every CPU of `allowed` back to the threads of this process's descendants that run on
    exactly `cpu`, the one the worker's threads were pinned to (they inherited it); a program that
    chose its CPUs itself keeps them. Returns how many threads were freed (at most `most` processes
    looked at)."""
    freed, seen, stack = 0, set[int](), children(os.getpid())
    while stack and len(seen) < most:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        stack += children(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                if os.sched_getaffinity(int(tid)) == {cpu}:
                    os.sched_setaffinity(int(tid), allowed)
                    freed += 1
            except OSError:  # it ended, or is not ours to change
                continue
    return freed


@dataclass
class Sample:
    """One tick's measure: the process's CPU use and each CPU's busy share, over `seconds`."""
    seconds: float
    usage: float  # CPUs this process used (1.0 = one CPU the whole time)
    busy: dict[int, float]  # per CPU: share of the time it was busy (this process included)
    rate: float  # attempts ended per second


def least_busy(busy: dict[int, float], allowed: set[int], rng: random.Random) -> int:
    """One of the least busy CPUs, at random among those within TIE of the least: workers started
    together read the same /proc/stat, and must not all pick the same CPU."""
    low = min(busy.get(cpu, 0.0) for cpu in allowed)
    return rng.choice(sorted(cpu for cpu in allowed if busy.get(cpu, 0.0) <= low + TIE))


def better_cpu(sample: Sample, current: int, allowed: set[int], rng: random.Random) -> int | None:
    """Another CPU to move to when others crowd ours (the process's own use is on ours). Half the
    time only: two workers crowding one CPU would otherwise both move, and crowd the next."""
    others_on_ours = sample.busy.get(current, 0.0) - sample.usage
    best = least_busy(sample.busy, allowed - {current}, rng)
    if others_on_ours > CROWDED and sample.busy.get(best, 0.0) < others_on_ours - CROWDED / 2 and rng.random() < 0.5:
        return best
    return None


class Keeper:
    """The decision, one tick at a time (the worker's affinity loop calls tick every TICK_S)."""

    def __init__(self, worker_id: str, allowed: set[int], *, sync_started: Callable[[], bool],
                 ended: Callable[[], int], running_for: Callable[[], float] = lambda: 0.0,
                 apply: Callable[[set[int]], None] = set_threads,
                 free: Callable[[int, set[int]], int] = free_descendants,
                 clock: Callable[[], float] = time.monotonic, rng: random.Random | None = None) -> None:
        self.worker_id = worker_id
        self.allowed = allowed
        self.sync_started = sync_started
        self.ended = ended
        self.running_for = running_for  # seconds the longest-running sync attempt has run (0: none)
        self.apply = apply
        self.free = free
        self.clock = clock
        self.rng = rng or random.Random()
        self.pinned: int | None = None  # the CPU the threads are on; None: all of `allowed`
        self.parallel_until = 0.0
        self.long_until = 0.0  # a long attempt ran: every CPU until then
        self.probe_at = 0.0
        self.busy_at = 0.0  # when a tick last saw attempts end
        self._cpu = CpuMeter()  # this process's share of a CPU between two measures
        self._last: tuple[float, dict[int, float], int] | None = None
        self._announced: int | None = None  # the CPU last logged at info (a probe's return is not news)
        self.woken = asyncio.Event()  # set by wake: decide now, not at the next tick
        self.measure()  # the first tick measures from here

    def wake(self) -> None:
        """The worker's first sync handler is starting: its threads need not wait for the next
        tick to be pinned (a worker's first tasks reach their bodies sooner too)."""
        self.woken.set()

    def first_sync(self) -> None:
        """Pin now, on the least busy CPU since the last measure, unless a rule says otherwise.
        The process's CPU use over so short a time says nothing: the next ticks judge it."""
        now = self.clock()
        if self.pinned is not None or now < self.parallel_until or now < self.long_until or not self.sync_started():
            return
        sample = self.measure()  # each CPU's use since the last measure, and the next tick's start
        busy = sample.busy if sample is not None else {cpu: 0.0 for cpu in self.allowed}
        self._pin(least_busy(busy, self.allowed, self.rng), None)
        self.probe_at = now + EARLY_PROBE_S  # handlers running C code in parallel: known within seconds

    def measure(self) -> Sample | None:
        now, (_, share), busy, ended = self.clock(), self._cpu.read(), cpu_busy(), self.ended()
        last, self._last = self._last, (now, busy, ended)
        if last is None or now - last[0] <= 0:
            return None
        dt = now - last[0]
        shares = {c: max(0.0, (b - last[1].get(c, b)) / dt) for c, b in busy.items()}
        return Sample(dt, share / 100, shares, (ended - last[2]) / dt)

    def tick(self, sample: Sample) -> None:
        now = self.clock()
        was_idle = now - self.busy_at > IDLE_S
        if sample.rate > 0:
            self.busy_at = now
        long_running = self.running_for() >= LONG_S
        if long_running:
            self.long_until = now + LONG_HOLD_S
        if self.pinned is None:
            if sample.usage > PARALLEL:
                if now >= self.parallel_until:
                    self._announced = None
                    logger.info("worker_id=%s handler threads used %.2f CPUs at once: left on every CPU",
                                self.worker_id, sample.usage)
                self.parallel_until = now + HOLD_S
            elif self.sync_started() and now >= self.parallel_until and now >= self.long_until:
                self._pin(least_busy(sample.busy, self.allowed, self.rng), sample)
            return
        if sample.rate > 0 and was_idle:
            # Busy again after an idle spell, pinned on measures of nothing: what runs now may be
            # handlers that use several CPUs at once; measure unpinned soon, not in PROBE_S.
            self.probe_at = min(self.probe_at, now + EARLY_PROBE_S)
        # A probe measures what the handlers use unpinned: none run while the worker ends no
        # attempt, so an idle worker waits for work to probe (its threads stay on one CPU).
        if long_running or (now >= self.probe_at and sample.rate > 0):
            self._unpin()  # long attempts, or time to measure unpinned again
            return
        self._free_children(self.pinned)
        move = better_cpu(sample, self.pinned, self.allowed, self.rng)
        if move is not None:
            self.apply({move})
            logger.debug("worker_id=%s moved its threads from CPU %d (%.0f%% used by others) to CPU %d",
                         self.worker_id, self.pinned, 100 * (sample.busy.get(self.pinned, 0.0) - sample.usage), move)
            old, self.pinned = self.pinned, move
            self._free_children(old)  # programs started between the scan above and the move

    def _pin(self, cpu: int, sample: Sample | None) -> None:
        self.apply({cpu})
        self.pinned = cpu
        self.probe_at = self.clock() + PROBE_S * self.rng.uniform(0.8, 1.2)
        if sample is None:
            logger.log(logging.DEBUG if cpu == self._announced else logging.INFO,
                       "worker_id=%s threads on CPU %d (its first sync handler)", self.worker_id, cpu)
        else:
            logger.log(logging.DEBUG if cpu == self._announced else logging.INFO,
                       "worker_id=%s threads on CPU %d (%.0f attempts/s, %.2f CPUs used unpinned)",
                       self.worker_id, cpu, sample.rate, sample.usage)
        self._announced = cpu

    def release(self) -> None:
        """Every CPU again, for good (the worker stops)."""
        if self.pinned is not None:
            self._unpin()

    def _unpin(self) -> None:
        self.apply(self.allowed)
        cpu, self.pinned = self.pinned, None
        if cpu is not None:
            self._free_children(cpu)
        logger.debug("worker_id=%s threads on every CPU again", self.worker_id)

    def _free_children(self, cpu: int) -> None:
        freed = self.free(cpu, self.allowed)
        if freed:
            logger.debug("worker_id=%s gave every CPU back to %d thread(s) of programs its handlers started",
                         self.worker_id, freed)


async def keep(keeper: Keeper) -> None:
    """The worker's affinity loop: a measure and a decision every TICK_S (jittered, so two
    workers on one machine do not move in step), and one as the first sync handler starts. When
    it ends (the worker stops) the threads get every CPU back: a process that ran a Worker among
    other work (a test suite, an embedding program) goes on unpinned."""
    try:
        while True:
            try:
                async with asyncio.timeout(TICK_S * random.uniform(0.9, 1.1)):
                    await keeper.woken.wait()
            except TimeoutError:
                sample = keeper.measure()
                if sample is not None:
                    keeper.tick(sample)
            else:
                keeper.woken.clear()
                keeper.first_sync()
    finally:
        keeper.release()
