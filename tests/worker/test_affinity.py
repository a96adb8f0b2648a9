"""DTQ_WORKER_CPU_AFFINITY: a worker of short sync handlers keeps its threads on one CPU, busy or
idle (dtq_core/worker/affinity.py), leaves them every CPU when its handlers run in parallel, run
long, or the operator said off, and gives the programs its handlers start every CPU back."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dtq_core import registry
from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine
from dtq_core.worker import Worker, affinity
from dtq_core.worker.affinity import Keeper, Sample

from ..conftest import ROOT, WorkerProcess, wait_for, worker_env
from ..failure.support import counter, outcomes

ALLOWED = {0, 1, 2, 3}


class AlwaysLow(random.Random):
    """random() at its lowest: a crowded worker moves on the first tick that finds it crowded."""

    def random(self) -> float:
        return 0.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Attempts:
    """What the keeper asks the worker: how long its longest-running sync attempt has run."""

    def __init__(self) -> None:
        self.longest_s = 0.0

    def __call__(self) -> float:
        return self.longest_s


def keeper(*, sync: bool = True) -> tuple[Keeper, list[set[int]], Clock]:
    k, applied, clock, _, _ = keeper_with(sync=sync)
    return k, applied, clock


def keeper_with(*, sync: bool = True) -> tuple[Keeper, list[set[int]], Clock, Attempts, list[int]]:
    """A keeper with its inputs and outputs: the CPU sets applied, the clock, the attempts, and
    the CPUs whose inheriting child processes it freed."""
    applied: list[set[int]] = []
    freed: list[int] = []
    clock, attempts = Clock(), Attempts()

    def free(cpu: int, allowed: set[int]) -> int:
        assert allowed == ALLOWED
        freed.append(cpu)
        return 0

    k = Keeper("w1", set(ALLOWED), sync_started=lambda: sync, ended=lambda: 0, running_for=attempts,
               apply=applied.append, free=free, clock=clock, rng=AlwaysLow(7))
    return k, applied, clock, attempts, freed


def sample(usage: float, rate: float, busy: dict[int, float] | None = None) -> Sample:
    return Sample(0.25, usage, busy if busy is not None else {0: 0.9, 1: 0.6, 2: 0.1, 3: 0.4}, rate)


def test_a_worker_turning_over_short_sync_attempts_goes_to_the_least_busy_cpu() -> None:
    k, applied, _ = keeper()
    k.tick(sample(usage=0.9, rate=4000))
    assert applied == [{2}] and k.pinned == 2


def test_an_idle_worker_of_sync_handlers_is_pinned_ready_for_its_next_task() -> None:
    k, applied, _ = keeper()
    k.tick(sample(usage=0.01, rate=0))  # sporadic tasks: the next one reaches its body sooner pinned
    k.tick(sample(usage=0.01, rate=0))
    assert applied == [{2}] and k.pinned == 2


def test_the_first_sync_handler_pins_at_once_unless_a_rule_says_otherwise() -> None:
    k, applied, clock, attempts, _ = keeper_with()
    k.first_sync()  # the worker's handler threads just started: no need to wait for a tick
    assert len(applied) == 1 and k.pinned is not None and applied[0] == {k.pinned}
    k.first_sync()  # pinned already: nothing more
    assert len(applied) == 1
    k2, applied2, clock2, attempts2, _ = keeper_with()
    attempts2.longest_s = affinity.LONG_S
    k2.tick(sample(usage=0.5, rate=10))  # a long attempt ran: every CPU for LONG_HOLD_S
    k2.first_sync()
    k3, applied3, _ = keeper(sync=False)
    k3.first_sync()  # no sync handler after all
    assert applied2 == [] and applied3 == [] and k2.pinned is None and k3.pinned is None


def test_the_affinity_loop_decides_when_woken_without_waiting_for_its_tick() -> None:
    k, applied, _, _, _ = keeper_with()

    async def run() -> None:
        loop = asyncio.create_task(affinity.keep(k))
        try:
            k.wake()
            deadline = time.monotonic() + affinity.TICK_S / 2  # well before the first tick
            while not applied and time.monotonic() < deadline:
                await asyncio.sleep(0.005)
        finally:
            loop.cancel()

    asyncio.run(run())
    assert len(applied) == 2 and k.pinned is None  # pinned when woken, every CPU once the loop ended
    assert applied[0] != ALLOWED and applied[1] == ALLOWED


def test_a_stopping_worker_gives_its_threads_and_their_programs_every_cpu_back() -> None:
    k, applied, _, _, freed = keeper_with()
    k.release()  # never pinned: nothing to undo
    assert applied == [] and freed == []
    k.first_sync()
    cpu = k.pinned
    k.release()
    assert applied[-1] == ALLOWED and freed == [cpu] and k.pinned is None


def test_async_handlers_alone_and_long_attempts_leave_the_threads_alone() -> None:
    k, applied, _ = keeper(sync=False)
    k.tick(sample(usage=0.9, rate=4000))  # no handler threads: nothing to gain
    k2, applied2, _, attempts, _ = keeper_with()
    attempts.longest_s = affinity.LONG_S  # long tasks: every CPU for what they start
    k2.tick(sample(usage=0.9, rate=4000))
    assert applied == [] and applied2 == [] and k.pinned is None and k2.pinned is None


def test_handlers_that_ran_on_more_than_one_cpu_keep_every_cpu_for_a_while() -> None:
    k, applied, clock = keeper()
    k.tick(sample(usage=1.7, rate=4000))  # C code in parallel (hashing, numpy): pinning would halve it
    clock.now += affinity.HOLD_S - 1
    k.tick(sample(usage=0.9, rate=4000))
    assert applied == [] and k.pinned is None
    clock.now += 2  # the hold is over and the last measure shows one CPU's worth
    k.tick(sample(usage=0.9, rate=4000))
    assert applied == [{2}]


def test_a_pinned_worker_lets_go_when_an_attempt_runs_long_and_to_measure_again() -> None:
    k, applied, clock, attempts, freed = keeper_with()
    k.tick(sample(usage=0.9, rate=4000))
    attempts.longest_s = affinity.LONG_S + 0.05  # e.g. a handler running a program
    k.tick(sample(usage=0.5, rate=10))
    assert applied == [{2}, ALLOWED] and k.pinned is None
    assert freed == [2]  # what that handler started on CPU 2 gets every CPU too
    # Short again: still every CPU until LONG_HOLD_S after the last long attempt was seen.
    attempts.longest_s = 0.0
    clock.now += affinity.LONG_HOLD_S - 1
    k.tick(sample(usage=0.5, rate=400))
    assert k.pinned is None and len(applied) == 2
    clock.now += 2
    k.tick(sample(usage=0.9, rate=4000))
    assert applied[-1] == {2} and k.pinned == 2
    clock.now += affinity.PROBE_S * 1.2 + 1  # past the jittered probe time
    k.tick(sample(usage=0.9, rate=4000, busy={0: 0.9, 1: 0.6, 2: 0.95, 3: 0.4}))
    assert applied[-1] == ALLOWED and k.pinned is None  # one tick unpinned: the parallel measure stays current


def test_a_pinned_worker_frees_the_programs_its_handlers_start_every_tick() -> None:
    k, _, _, _, freed = keeper_with()
    k.tick(sample(usage=0.9, rate=4000))
    assert freed == []  # nothing was pinned before
    k.tick(sample(usage=0.9, rate=4000))
    k.tick(sample(usage=0.2, rate=4000, busy={0: 0.9, 1: 0.6, 2: 1.0, 3: 0.1}))  # crowded: moves to CPU 3
    k.tick(sample(usage=0.9, rate=4000, busy={0: 0.9, 1: 0.6, 2: 0.3, 3: 0.9}))
    # Each tick, those started on the CPU pinned then; after a move, those started on the old CPU
    # between that tick's scan and the move too.
    assert freed == [2, 2, 2, 3] and k.pinned == 3


def test_handlers_that_run_c_code_in_parallel_are_measured_unpinned_soon_after_a_pin() -> None:
    # The first sync handler pins at once, on no measure (a pinned process cannot show it would
    # use two CPUs): the first probe comes within EARLY_PROBE_S, not PROBE_S, and finds them.
    k, applied, clock, _, _ = keeper_with()
    k.first_sync()
    clock.now += affinity.TICK_S
    k.tick(sample(usage=0.99, rate=300))
    assert k.pinned is not None
    clock.now += affinity.EARLY_PROBE_S
    k.tick(sample(usage=0.99, rate=300))
    assert k.pinned is None and applied[-1] == ALLOWED  # the probe: one tick on every CPU
    clock.now += affinity.TICK_S
    k.tick(sample(usage=1.8, rate=600))  # what they use when they may
    clock.now += affinity.TICK_S
    k.tick(sample(usage=1.8, rate=600))
    assert k.pinned is None and applied[-1] == ALLOWED  # and left on every CPU for HOLD_S


def test_a_pinned_idle_worker_measures_again_soon_once_tasks_come_back() -> None:
    # Pinned while idle (on measures of nothing), then a busy spell: probed within EARLY_PROBE_S.
    k, applied, clock, _, _ = keeper_with()
    for _ in range(3):
        k.tick(sample(usage=0.01, rate=0))
        clock.now += affinity.TICK_S
    assert k.pinned == 2
    clock.now += affinity.IDLE_S
    k.tick(sample(usage=0.99, rate=300))  # tasks again
    assert k.pinned == 2
    clock.now += affinity.EARLY_PROBE_S
    k.tick(sample(usage=0.99, rate=300))
    assert k.pinned is None and applied[-1] == ALLOWED
    # Short tasks on one CPU's worth: pinned again, and the next probe is PROBE_S away.
    clock.now += affinity.TICK_S
    k.tick(sample(usage=0.9, rate=4000))
    for _ in range(int(affinity.PROBE_S * 0.8 / affinity.TICK_S) - 1):
        clock.now += affinity.TICK_S
        k.tick(sample(usage=0.9, rate=4000))
    assert k.pinned == 2


def test_an_idle_pinned_worker_defers_its_probe_until_tasks_end_again() -> None:
    # Unpinned while idle, a probe would measure nothing and leave the threads spread for a tick,
    # just as the next sporadic task may come: it waits for the first tick that ended attempts.
    k, applied, clock, _, _ = keeper_with()
    k.tick(sample(usage=0.9, rate=4000))
    assert k.pinned == 2
    clock.now += affinity.PROBE_S * 1.2 + 1  # past the jittered probe time
    for _ in range(8):
        k.tick(sample(usage=0.01, rate=0))
        clock.now += affinity.TICK_S
    assert k.pinned == 2 and applied == [{2}]
    k.tick(sample(usage=0.9, rate=300))
    assert k.pinned is None and applied[-1] == ALLOWED  # the probe, with work to measure


def test_workers_started_together_spread_over_the_cpus_that_are_equally_free() -> None:
    picks = set()
    for seed in range(40):
        k = Keeper("w", set(ALLOWED), sync_started=lambda: True, ended=lambda: 0, apply=lambda cpus: None,
                   rng=random.Random(seed))
        k.tick(sample(usage=0.9, rate=4000, busy={0: 0.9, 1: 0.15, 2: 0.1, 3: 0.2}))
        picks.add(k.pinned)
    assert picks == {1, 2, 3}  # within 0.2 of the least busy: all as good; never the busy CPU 0


def test_a_pinned_worker_moves_off_a_cpu_others_crowd() -> None:
    k, applied, _ = keeper()
    k.tick(sample(usage=0.9, rate=4000))
    # Its CPU 2 is now busy 1.0 of which 0.2 is its own; CPU 3 has room.
    k.tick(sample(usage=0.2, rate=4000, busy={0: 0.9, 1: 0.6, 2: 1.0, 3: 0.1}))
    assert applied == [{2}, {3}] and k.pinned == 3
    k.tick(sample(usage=0.8, rate=4000, busy={0: 0.9, 1: 0.6, 2: 0.3, 3: 0.9}))  # its own use: no move
    assert k.pinned == 3 and len(applied) == 2


def test_the_mode_must_be_auto_or_off() -> None:
    DtqConfig(worker_cpu_affinity="off")
    with pytest.raises(ConfigError, match="DTQ_WORKER_CPU_AFFINITY must be one of auto, off"):
        DtqConfig(worker_cpu_affinity="sometimes")


def test_a_worker_started_with_a_bad_mode_exits_with_one_line() -> None:
    env = worker_env("redis://127.0.0.1:1/0", "dtqtest:aff", DTQ_WORKER_CPU_AFFINITY="core0")
    proc = subprocess.run([sys.executable, "manage.py", "runworker_dtq", "--burst"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "DTQ_WORKER_CPU_AFFINITY must be one of auto, off (got 'core0')" in proc.stderr


# -- a real worker process ----------------------------------------------------------------------

needs_cpus = pytest.mark.skipif(not affinity.available() or len(os.sched_getaffinity(0)) < 2,
                                reason="needs Linux and at least 2 CPUs this process may use")


def thread_cpus(pid: int) -> list[set[int]]:
    cpus = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            cpus.append(os.sched_getaffinity(int(tid)))
        except OSError:  # the thread ended
            continue
    return cpus


def fill(engine: Engine, n: int) -> None:
    for _ in range(0, n, 1000):
        replies = engine.tasks.enqueue_many([engine.tasks.validate("test.pid", {}, queue="aff") for _ in range(1000)])
        assert not any(isinstance(r, Exception) for r in replies)


def done(engine: Engine, total: int) -> int:
    """Tasks of queue "aff" no longer waiting or running."""
    row = engine.queues.get("aff")
    return total - row["waiting"] - row["pending"]


def pinned_to(pid: int) -> int | None:
    """The one CPU every thread of `pid` is on (0 is one), or None."""
    cpus = {frozenset(c) for c in thread_cpus(pid)}
    if len(cpus) == 1 and len(only := next(iter(cpus))) == 1:
        return next(iter(only))
    return None


@needs_cpus
def test_a_worker_draining_short_sync_tasks_runs_its_threads_on_one_cpu_and_stays_there_idle(
        engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    allowed = os.sched_getaffinity(0)
    fill(engine, 30000)
    worker = start_worker("--queues", "aff", "--concurrency", "10", DTQ_TASK_MODULES="tests.worker.handlers",
                          DTQ_LOG_LEVEL="INFO")
    wait_for(lambda: len(thread_cpus(worker.pid)) > 10, message=worker.output)  # its handler threads started
    wait_for(lambda: pinned_to(worker.pid) is not None, timeout=30, message=worker.output)
    assert pinned_to(worker.pid) in allowed  # every thread on the same one
    assert done(engine, 30000) < 30000, "drained before the check: the test proves nothing"
    # The worker logs the pin just after making it.
    wait_for(lambda: "threads on CPU" in worker.output(), timeout=10, message=worker.output)
    # Drained, idle: still on one CPU (the next sporadic task reaches its body sooner), tick after tick.
    wait_for(lambda: done(engine, 30000) == 30000, timeout=120, message=worker.output)
    # A probe during the drain (EARLY_PROBE_S after the pin) that measured the threads on more than
    # PARALLEL CPUs (a busy CI machine) leaves them on every CPU for HOLD_S: idle, they are pinned
    # again after it.
    wait_for(lambda: pinned_to(worker.pid) is not None, timeout=affinity.HOLD_S + 10, message=worker.output)
    # Every look finds each thread on one CPU (a move off a crowded CPU goes thread by thread, so a
    # look during one may find two).
    looks, until = 0, time.monotonic() + 4 * affinity.TICK_S
    while time.monotonic() < until:
        cpus = thread_cpus(worker.pid)
        assert all(len(c) == 1 for c in cpus), cpus
        looks += 1
        time.sleep(0.02)  # a look every 20 ms, not a wait for anything
    assert looks > 10


@needs_cpus
def test_pinned_workers_whose_handlers_hold_the_gil_keep_their_heartbeats_and_lose_nothing(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # Two workers, each with its threads on one CPU, running handlers that compute in Python
    # (each thread holds the GIL for its whole attempt) for several visibility timeouts. The loop
    # thread that heartbeats gets the GIL at the interpreter's switch interval, pinned or not: no
    # heartbeat gap, so neither worker's reaper takes a task the other still runs.
    n, fast = 3500, {"DTQ_VISIBILITY_TIMEOUT_S": 2, "DTQ_HEARTBEAT_INTERVAL_S": 0.5,
                     "DTQ_TASK_MODULES": "tests.worker.handlers"}
    workers = [start_worker("--name", f"gil{i}", "--queues", "aff", "--concurrency", "4", **fast) for i in range(2)]
    for i, w in enumerate(workers):
        wait_for(lambda i=i: redis_client.zscore(engine.keys.workers(), f"gil{i}") is not None, timeout=30,
                 message=w.output)
    started = time.monotonic()
    for _ in range(0, n, 500):  # about 4 ms of CPU each: short attempts, so the threads stay pinned
        engine.tasks.enqueue_many([engine.tasks.validate("test.spin", {"ms": 4}, queue="aff") for _ in range(500)])
    wait_for(lambda: all(pinned_to(w.pid) is not None for w in workers), timeout=30,
             message=lambda: "\n".join(w.output() for w in workers))
    assert done(engine, n) < n / 2, "drained before both were pinned: the test proves nothing"
    wait_for(lambda: done(engine, n) == n, timeout=120, message=lambda: "\n".join(w.output() for w in workers))
    assert time.monotonic() - started > 3 * 2, "drained within three visibility timeouts: too short to tell"
    assert counter(redis_client, engine.keys, "redeliveries") == 0
    assert counter(redis_client, engine.keys, "absorbed") == 0
    assert outcomes(redis_client, engine.keys).get("aff|test.spin|succeeded") == n
    for w in workers:
        assert "heartbeats resumed" not in w.output(), w.output()
        assert "threads on CPU" in w.output()


@needs_cpus
def test_a_long_attempt_gives_the_threads_every_cpu_while_it_runs(
        engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    allowed = os.sched_getaffinity(0)
    worker = start_worker("--queues", "aff", "--concurrency", "4", DTQ_TASK_MODULES="tests.worker.handlers")
    engine.tasks.enqueue("test.pid", queue="aff")  # its first sync task starts the handler threads
    wait_for(lambda: pinned_to(worker.pid) is not None, timeout=20, message=worker.output)
    task_id = engine.tasks.enqueue("test.sleep", {"s": 30}, queue="aff").id
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "RUNNING", timeout=20, message=worker.output)
    # Within a tick of the attempt passing LONG_S, and for as long as it runs.
    wait_for(lambda: all(c == allowed for c in thread_cpus(worker.pid)), timeout=5, message=worker.output)
    assert engine.tasks.get(task_id)["status"] == "RUNNING"


@needs_cpus
def test_a_program_a_pinned_handler_starts_gets_every_cpu_back(
        engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    allowed = os.sched_getaffinity(0)
    worker = start_worker("--queues", "aff", "--concurrency", "4", DTQ_TASK_MODULES="tests.worker.handlers")
    engine.tasks.enqueue("test.pid", queue="aff")
    wait_for(lambda: pinned_to(worker.pid) is not None, timeout=20, message=worker.output)
    task_id = engine.tasks.enqueue("test.spawn", {"s": 120}, queue="aff").id
    task = wait_for(lambda: (t := engine.tasks.get(task_id))["status"] == "SUCCEEDED" and t, timeout=20,
                    message=worker.output)
    child = task["result"]["pid"]
    try:
        assert child in affinity.children(worker.pid)  # started by the worker's handler thread
        wait_for(lambda: os.sched_getaffinity(child) == allowed, timeout=5,
                 message=lambda: f"the program is still on {os.sched_getaffinity(child)}\n{worker.output()}")
        assert all(len(c) == 1 for c in thread_cpus(worker.pid))  # the worker's own threads stay pinned
    finally:
        os.kill(child, signal.SIGKILL)


@needs_cpus
def test_the_programs_on_the_pinned_cpu_get_every_cpu_and_others_keep_theirs() -> None:
    allowed = os.sched_getaffinity(0)
    cpu, other = sorted(allowed)[:2]
    shell = subprocess.Popen(["sh", "-c", "sleep 120 & wait"])
    chooser = subprocess.Popen(["sleep", "120"])
    grandchild = None
    try:
        grandchild = wait_for(lambda: next(iter(affinity.children(shell.pid)), None), timeout=10,
                              message="the shell started no sleep")
        for pid in (shell.pid, grandchild):
            os.sched_setaffinity(pid, {cpu})  # as if started by a thread pinned to cpu
        os.sched_setaffinity(chooser.pid, {other})  # a program that chose its CPU itself
        assert affinity.free_descendants(cpu, allowed) >= 2
        assert os.sched_getaffinity(shell.pid) == allowed and os.sched_getaffinity(grandchild) == allowed
        assert os.sched_getaffinity(chooser.pid) == {other}
    finally:
        if grandchild is not None:
            os.kill(grandchild, signal.SIGKILL)
        for proc in (shell, chooser):
            proc.kill()
            proc.wait(timeout=10)


@needs_cpus
def test_a_worker_run_inside_another_process_leaves_it_on_every_cpu_when_it_stops(config: DtqConfig) -> None:
    """A Worker run in a process that does other work too (this test suite; an embedding program)
    pins all that process's threads while it runs sync handlers: they get every CPU back as it stops."""
    allowed = os.sched_getaffinity(0)
    seen: list[set[int]] = []

    def where(payload: Any) -> None:
        seen.append(os.sched_getaffinity(0))
        time.sleep(0.01)

    registry.register("test.where_cpu", where)  # as test_worker_behaviour's handlers: kept for the session
    engine = Engine(config)
    for _ in range(30):
        engine.tasks.enqueue("test.where_cpu", queue="inproc")
    worker = Worker(config, queues=["inproc"], burst=True, name=f"inproc-{time.monotonic_ns()}")
    asyncio.run(asyncio.wait_for(worker.run(), 60))
    assert len(seen) == 30 and any(len(cpus) == 1 for cpus in seen), seen  # it did pin while it ran
    assert all(c == allowed for c in thread_cpus(os.getpid()))


@needs_cpus
def test_off_leaves_a_busy_workers_threads_to_the_os(engine: Engine,
                                                    start_worker: Callable[..., WorkerProcess]) -> None:
    allowed = os.sched_getaffinity(0)
    fill(engine, 20000)
    worker = start_worker("--queues", "aff", "--concurrency", "10", DTQ_TASK_MODULES="tests.worker.handlers",
                          DTQ_WORKER_CPU_AFFINITY="off", DTQ_LOG_LEVEL="INFO")
    wait_for(lambda: done(engine, 20000) > 0, timeout=30, message=worker.output)
    seen = []
    # Through the drain (auto pins within a second of its start: the test above), every look.
    deadline = time.monotonic() + 120
    while done(engine, 20000) < 20000 and worker.proc.poll() is None and time.monotonic() < deadline:
        seen.append(thread_cpus(worker.pid))
    assert done(engine, 20000) == 20000, worker.output()
    assert len(seen) > 10, "drained too fast to look"
    assert all(c == allowed for cpus in seen for c in cpus)
    assert "threads on CPU" not in worker.output()
