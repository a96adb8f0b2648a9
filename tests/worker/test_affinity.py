"""DTQ_WORKER_CPU_AFFINITY: a worker busy with short sync handlers keeps its threads on one CPU
(dtq_core/worker/affinity.py), and leaves them every CPU when its handlers run in parallel, run
long, or the operator said off."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections.abc import Callable

import pytest

from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine
from dtq_core.worker import affinity
from dtq_core.worker.affinity import Keeper, Sample

from ..conftest import ROOT, WorkerProcess, wait_for, worker_env

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


def keeper(*, sync: bool = True) -> tuple[Keeper, list[set[int]], Clock]:
    applied: list[set[int]] = []
    clock = Clock()
    k = Keeper("w1", set(ALLOWED), sync_started=lambda: sync, ended=lambda: 0, apply=applied.append, clock=clock,
               rng=AlwaysLow(7))
    return k, applied, clock


def sample(usage: float, rate: float, busy: dict[int, float] | None = None) -> Sample:
    return Sample(0.25, usage, busy if busy is not None else {0: 0.9, 1: 0.6, 2: 0.1, 3: 0.4}, rate)


def test_a_worker_turning_over_short_sync_attempts_goes_to_the_least_busy_cpu() -> None:
    k, applied, _ = keeper()
    k.tick(sample(usage=0.9, rate=4000))
    assert applied == [{2}] and k.pinned == 2


def test_async_handlers_alone_and_slow_turnover_leave_the_threads_alone() -> None:
    k, applied, _ = keeper(sync=False)
    k.tick(sample(usage=0.9, rate=4000))  # no handler threads: nothing to gain
    k2, applied2, _ = keeper()
    k2.tick(sample(usage=0.9, rate=affinity.SHORT_RATE - 1))  # long tasks: every CPU for what they start
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


def test_a_pinned_worker_lets_go_when_work_slows_and_to_measure_again() -> None:
    k, applied, clock = keeper()
    k.tick(sample(usage=0.9, rate=4000))
    k.tick(sample(usage=0.1, rate=10))  # idle, or its tasks became long
    assert applied == [{2}, ALLOWED] and k.pinned is None
    k.tick(sample(usage=0.9, rate=4000))
    clock.now += affinity.PROBE_S * 1.2 + 1  # past the jittered probe time
    k.tick(sample(usage=0.9, rate=4000, busy={0: 0.9, 1: 0.6, 2: 0.95, 3: 0.4}))
    assert applied[-1] == ALLOWED and k.pinned is None  # one tick unpinned: the parallel measure stays current


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


@needs_cpus
def test_a_worker_draining_short_sync_tasks_runs_its_threads_on_one_cpu_then_lets_go(
        engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    allowed = os.sched_getaffinity(0)
    fill(engine, 30000)
    worker = start_worker("--queues", "aff", "--concurrency", "10", DTQ_TASK_MODULES="tests.worker.handlers",
                          DTQ_LOG_LEVEL="INFO")
    wait_for(lambda: len(thread_cpus(worker.pid)) > 10, message=worker.output)  # its handler threads started
    pinned = wait_for(lambda: {frozenset(c) for c in thread_cpus(worker.pid)} if all(
        len(c) == 1 for c in thread_cpus(worker.pid)) else None, timeout=30, message=worker.output)
    assert len(pinned) == 1 and next(iter(pinned)) <= allowed  # every thread on the same one
    assert done(engine, 30000) < 30000, "drained before the check: the test proves nothing"
    assert "threads on CPU" in worker.output()
    # Drained: no short attempts to turn over, every CPU again.
    wait_for(lambda: done(engine, 30000) == 30000, timeout=120, message=worker.output)
    wait_for(lambda: all(c == allowed for c in thread_cpus(worker.pid)), timeout=10, message=worker.output)


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
