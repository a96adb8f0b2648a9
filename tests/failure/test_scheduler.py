"""Scheduler leadership with real processes: a SIGKILLed leader is replaced, claims it left behind
are returned, and a leader paused (SIGSTOP) past its lock is fenced out of every scheduler write."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.clock import iso
from dtq_core.engine import Engine
from dtq_core.keys import Keys

from ..conftest import WorkerProcess, wait_for
from .support import cont, env, execs, statuses, stop

pytestmark = pytest.mark.slow


def _leader(client: redis.Redis, keys: Keys) -> str | None:
    return client.get(keys.scheduler_lock())


def test_a_killed_leader_is_replaced_and_its_stale_claims_are_returned(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: every delayed task and every claim the dead leader held. The lock expires,
    # the follower takes it, promotes due work, and returns the stale claim to the schedule.
    engine, keys = live_engine, live_engine.keys
    a = start_worker("--name", "a", "--queues", "sched", **env())
    wait_for(lambda: _leader(redis_client, keys) == "a", message=a.output())
    b = start_worker("--name", "b", "--queues", "sched", **env())
    wait_for(lambda: redis_client.zscore(keys.workers(), "b"), message=b.output())
    delayed = [engine.enqueue("failure.work", queue="sched", delay_seconds=1.5).id for _ in range(5)]
    # The state a leader leaves when it dies between claimDue and enqueueDue: the task is out of
    # the schedule and held in the claims zset (claimed 10 s ago).
    claimed = engine.enqueue("failure.work", queue="sched", delay_seconds=3600).id
    pipe = redis_client.pipeline(transaction=True)
    pipe.zrem(keys.schedule(), claimed)
    pipe.hincrby(keys.schedule_counts(), "sched", -1)
    pipe.zadd(keys.schedule_claims(), {claimed: int(time.time() * 1000) - 10_000})
    pipe.execute()
    a.kill()
    wait_for(lambda: _leader(redis_client, keys) == "b", timeout=10, message=b.output())
    everything = [*delayed, claimed]
    wait_for(lambda: set(statuses(redis_client, keys, everything)) == {"SUCCEEDED"}, timeout=20,
             message=b.output())
    assert all(execs(redis_client, keys, tid) == 1 for tid in everything)
    assert redis_client.zcard(keys.schedule_claims()) == 0 and redis_client.zcard(keys.schedule()) == 0
    assert "returned 1 stale scheduler claim(s) to the schedule" in b.output()


def test_a_leader_paused_past_its_lock_cannot_move_due_entries(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: single promotion of each due task. While the old leader is frozen the
    # follower takes over; after SIGCONT the old leader steps down, and every scheduler script run
    # with its identity (what it would do next, from wherever it was frozen) is refused.
    engine, keys = live_engine, live_engine.keys
    a = start_worker("--name", "a", "--queues", "split", **env())
    wait_for(lambda: _leader(redis_client, keys) == "a", message=a.output())
    b = start_worker("--name", "b", "--queues", "split", **env())
    wait_for(lambda: redis_client.zscore(keys.workers(), "b"), message=b.output())
    stop(a.pid)
    try:
        wait_for(lambda: _leader(redis_client, keys) == "b", timeout=10, message=b.output())
        due = [engine.enqueue("failure.work", queue="split", delay_seconds=0.3).id for _ in range(5)]
        wait_for(lambda: set(statuses(redis_client, keys, due)) == {"SUCCEEDED"}, timeout=15, message=b.output())
    finally:
        cont(a.pid)
    wait_for(lambda: "worker_id=a lost scheduler leadership" in a.output(), timeout=10, message=a.output())
    assert _leader(redis_client, keys) == "b"
    later = engine.enqueue("failure.work", queue="split", delay_seconds=3600).id
    now = int(time.time() * 1000)
    far = now + 7200_000  # as if the frozen leader's clock said the task were due
    prefix = keys.task_prefix()
    assert engine.scripts("claimDue", keys=[keys.schedule(), keys.schedule_claims(), keys.scheduler_lock()],
                          args=["a", far, 500, prefix]) == -1
    assert engine.scripts("enqueueDue", keys=[keys.schedule_claims(), keys.scheduler_lock(), keys.events(),
                                              keys.event_seq(), keys.schedule(), keys.stats_tasks()],
                          args=["a", far, iso(far), 60_000, prefix, keys.stream_prefix(), keys.wake_prefix(),
                                later]) == -1
    assert engine.scripts("requeueStaleClaims", keys=[keys.schedule_claims(), keys.schedule(),
                                                      keys.scheduler_lock()],
                          args=[far, far, prefix, "a"]) == -1
    assert engine.scripts("recoverLostTasks", keys=[keys.paused(), keys.events(), keys.event_seq(), keys.dlq(),
                                                    keys.stats_counters(), keys.running(), keys.stats_tasks(),
                                                    keys.scheduler_lock()],
                          args=["dtq", "a", far, iso(far), 60_000, prefix, 1, 100, far, 500,
                                keys.stream_prefix(), keys.wake_prefix()]) == -1
    assert statuses(redis_client, keys, [later]) == ["PENDING"] and redis_client.zscore(keys.schedule(), later)
    assert all(execs(redis_client, keys, tid) == 1 for tid in due)
    assert a.proc.poll() is None  # the old leader keeps working as a follower
