"""The chaos check (`make chaos`): 2,000 tasks through 3 workers that are SIGKILLed and restarted
at random. Every task must end SUCCEEDED with nothing left pending; the side-effect log shows how
many tasks ran more than once, and the effect applied through idempotent_operation never twice."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import effects, env, execs, pending, statuses, total

pytestmark = pytest.mark.slow

TASKS = 2000
WORKERS = 3
MIN_KILLS = 6


def test_chaos_every_task_succeeds_and_no_side_effect_repeats(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: every task (SUCCEEDED), every entry (none left pending), and the side
    # effect (exactly once per task), while workers die mid-batch over and over.
    keys = engine.keys
    rng = random.Random()
    names = iter(f"chaos-{n}" for n in range(1000))
    fleet = [start_worker("--name", next(names), "--queues", "chaos", **env()) for _ in range(WORKERS)]
    # Crash redeliveries count against max_attempts; give enough budget that random kills never
    # dead-letter a task (the budget path has its own test).
    subs = [engine.tasks.validate("failure.chaos", {"n": i}, queue="chaos", max_attempts=25) for i in range(TASKS)]
    ids = [e.id for e in engine.tasks.enqueue_many(subs)]
    started = time.monotonic()

    def done() -> int:
        return sum(1 for s in statuses(redis_client, keys, ids) if s == "SUCCEEDED")

    kills = 0
    while kills < MIN_KILLS or (done() < TASKS * 0.8 and time.monotonic() - started < 25):
        time.sleep(rng.uniform(0.3, 0.9))  # fault-injection pacing, not synchronisation
        victim = rng.randrange(len(fleet))
        fleet[victim].kill()  # SIGKILL, wherever it is
        kills += 1
        fleet[victim] = start_worker("--name", next(names), "--queues", "chaos", **env())
    wait_for(lambda: done() == TASKS, timeout=60, interval=0.5,
             message=f"{done()}/{TASKS} succeeded\n" + "\n".join(w.output()[-3000:] for w in fleet))
    elapsed = time.monotonic() - started
    wait_for(lambda: pending(redis_client, keys, ["chaos"]) == 0, timeout=10)
    assert total(redis_client, keys, keys.running) == 0 and total(redis_client, keys, keys.schedule) == 0

    runs = execs(redis_client, keys)
    applied = effects(redis_client, keys)
    assert set(runs) == set(ids) and set(applied) == set(ids)
    duplicated = sum(1 for n in runs.values() if n > 1)
    extra = sum(n - 1 for n in runs.values())
    print(f"\nchaos: {TASKS} tasks, {WORKERS} workers, {kills} SIGKILLs in {elapsed:.1f}s: "
          f"{duplicated} task(s) executed more than once ({extra} extra execution(s)); "
          f"duplicate side effects through idempotent_operation: "
          f"{sum(1 for n in applied.values() if n > 1)}")
    assert all(n == 1 for n in applied.values())
