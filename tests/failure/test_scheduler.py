"""Scheduler leadership with real processes: a leader SIGKILLed between its two promotion steps
(claimDue, enqueueDue; stopped there by DTQ_TEST_FAULT=after_claim_due) is replaced and the claims
it left behind run once, and a leader paused (SIGSTOP) past its election and its partitions'
leases, mid-promotion or not, is fenced out of every scheduler write."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.clock import iso
from dtq_core.engine import Engine
from dtq_core.errors import ErrorCode
from dtq_core.keys import Keys, tag_of

from ..conftest import WorkerProcess, wait_for
from .support import Events, cont, counter, env, execs, pending, status, statuses, stop, stopped, streams, task

pytestmark = pytest.mark.slow


def _leader(client: redis.Redis, keys: Keys) -> str | None:
    return client.get(keys.leader())


def _lease(client: redis.Redis, keys: Keys, task_id: str) -> str | None:
    """Who holds the lease of the task's partition (fencing the leader's scripts there)."""
    return client.get(keys.lock(tag_of(task_id)))


def _leader_stopped_mid_promotion(engine: Engine, client: redis.Redis, start_worker: Callable[..., WorkerProcess],
                                  queue: str, retry_after: dict[str, float]
                                  ) -> tuple[WorkerProcess, list[str], str, int]:
    """Leader `a` stopped (DTQ_TEST_FAULT=after_claim_due) between claimDue and enqueueDue, holding
    the claims of five delayed tasks and a retrying one (failure.flaky, failing its first attempt
    and those `retry_after` lists); returns (a, delayed, retrying, claimed at)."""
    keys = engine.keys
    # The test holds the election until everything is due, so that a's first promotion claims it all.
    client.set(keys.leader(), "test", px=60_000)
    a = start_worker("--name", "a", "--queues", queue, **env(DTQ_TEST_FAULT="after_claim_due"))
    retrying = engine.tasks.enqueue("failure.flaky", {"retry_after": {"1": 0.2, **retry_after}}, queue=queue).id
    wait_for(lambda: status(client, keys, retrying) == "RETRYING", timeout=30, message=a.output)
    delayed = [engine.tasks.enqueue("failure.work", queue=queue, delay_seconds=0.2).id for _ in range(5)]
    everything = [*delayed, retrying]
    tag = tag_of(retrying)  # the queue has one partition
    assert {tag_of(tid) for tid in everything} == {tag}
    wait_for(lambda: client.zcount(keys.schedule(tag), "-inf", int(time.time() * 1000)) == len(everything))
    client.delete(keys.leader())
    wait_for(lambda: stopped(a.pid), timeout=10, message=a.output)
    claims = dict(client.zrange(keys.schedule_claims(tag), 0, -1, withscores=True))
    assert set(claims) == set(everything) and client.zcard(keys.schedule(tag)) == 0
    assert _leader(client, keys) == "a" and _lease(client, keys, retrying) == "a"
    assert statuses(client, keys, everything) == ["PENDING"] * 5 + ["RETRYING"]
    return a, delayed, retrying, int(max(claims.values()))


def test_a_leader_killed_between_claim_and_enqueue_is_replaced_and_its_claims_run_once(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: every delayed and retrying task the dead leader had claimed. The election
    # and the lease expire, b takes them, returns the claims once they are DTQ_STALE_CLAIM_S old, and promotes
    # each exactly once (one task.queued); each runs once more.
    engine, keys = live_engine, live_engine.keys
    a, delayed, retrying, claimed_at = _leader_stopped_mid_promotion(engine, redis_client, start_worker,
                                                                      "crashed", {})
    with Events(redis_client, keys) as events:
        # Whole records: the check below reads enqueued_at, which a compact record drops.
        b = start_worker("--name", "b", "--queues", "crashed", **env(DTQ_KEEP_PAYLOAD="all"))
        a.kill()
        everything = [*delayed, retrying]
        wait_for(lambda: set(statuses(redis_client, keys, everything)) == {"SUCCEEDED"}, timeout=30,
                 message=b.output)
        assert _leader(redis_client, keys) == "b" and _lease(redis_client, keys, retrying) == "b"
        assert "worker_id=b returned 6 stale scheduler claim(s) to the schedule" in b.output()
        events.sync()
        assert [events.count("task.queued", tid) for tid in everything] == [1] * 6
    stale_ms = env()["DTQ_STALE_CLAIM_S"] * 1000
    for tid in everything:
        record = task(redis_client, keys, tid)
        assert int(record["enqueued_at"]) >= claimed_at + stale_ms  # the claims were stale, not taken early
        assert record["worker_id"] == "b"
    assert [execs(redis_client, keys, tid) for tid in delayed] == [1] * 5
    assert execs(redis_client, keys, retrying) == 2 and task(redis_client, keys, retrying)["attempt"] == "2"
    tag = tag_of(retrying)
    assert redis_client.zcard(keys.schedule_claims(tag)) == 0 and redis_client.zcard(keys.schedule(tag)) == 0
    assert int(redis_client.hget(keys.schedule_counts(tag), "crashed") or 0) == 0
    assert pending(redis_client, keys, ["crashed"]) == 0 and counter(redis_client, keys, "absorbed") == 0


def test_a_leader_stopped_between_claim_and_enqueue_past_its_lock_writes_nothing_when_resumed(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: single promotion and single execution. b takes the election and the
    # partition's lease and promotes the
    # frozen leader's claims; the retrying task fails again there and waits an hour in RETRYING.
    # After SIGCONT, a's enqueueDue for those same ids (what it was about to do) is refused inside
    # the script: the delayed tasks are not queued again, nor is the retry queued before its time.
    engine, keys = live_engine, live_engine.keys
    a, delayed, retrying, _ = _leader_stopped_mid_promotion(engine, redis_client, start_worker, "resumed",
                                                            {"2": 3600})
    with Events(redis_client, keys) as events:
        try:
            b = start_worker("--name", "b", "--queues", "resumed", **env())
            wait_for(lambda: statuses(redis_client, keys, [*delayed, retrying]) == ["SUCCEEDED"] * 5 + ["RETRYING"]
                     and task(redis_client, keys, retrying)["attempt"] == "2", timeout=30, message=b.output)
        finally:
            cont(a.pid)
        due_at = redis_client.zscore(keys.schedule(tag_of(retrying)), retrying)
        assert due_at and due_at > time.time() * 1000 + 3_000_000
        wait_for(lambda: "worker_id=a lost scheduler leadership" in a.output(), timeout=15, message=a.output)
        events.sync()
        assert [events.count("task.queued", tid) for tid in [*delayed, retrying]] == [1] * 6
    assert _leader(redis_client, keys) == "b" and _lease(redis_client, keys, retrying) == "b"
    assert a.proc.poll() is None
    assert statuses(redis_client, keys, delayed) == ["SUCCEEDED"] * 5
    assert [execs(redis_client, keys, tid) for tid in delayed] == [1] * 5
    record = task(redis_client, keys, retrying)
    assert (record["status"], record["attempt"], execs(redis_client, keys, retrying)) == ("RETRYING", "2", 2)
    assert redis_client.zscore(keys.schedule(tag_of(retrying)), retrying) == due_at
    assert all(redis_client.xlen(stream) == 0 for stream in streams(redis_client, keys, "resumed"))  # no 2nd XADD
    assert pending(redis_client, keys, ["resumed"]) == 0 and counter(redis_client, keys, "absorbed") == 0
    assert redis_client.zcard(keys.schedule_claims(tag_of(retrying))) == 0


def test_a_leader_paused_past_its_lock_cannot_move_due_entries(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: single promotion of each due task. While the old leader is frozen the
    # follower takes over (the election, then the partition's lease); after SIGCONT the old leader
    # steps down, and every scheduler script run with its identity (what it would do next, from
    # wherever it was frozen) is refused by the partition's lease.
    engine, keys = live_engine, live_engine.keys
    a = start_worker("--name", "a", "--queues", "split", **env())
    wait_for(lambda: _leader(redis_client, keys) == "a", message=a.output())
    b = start_worker("--name", "b", "--queues", "split", **env())
    wait_for(lambda: redis_client.zscore(keys.workers(), "b"), message=b.output())
    stop(a.pid)
    try:
        wait_for(lambda: _leader(redis_client, keys) == "b", timeout=10, message=b.output())
        due = [engine.tasks.enqueue("failure.work", queue="split", delay_seconds=0.3).id for _ in range(5)]
        wait_for(lambda: set(statuses(redis_client, keys, due)) == {"SUCCEEDED"}, timeout=15, message=b.output())
    finally:
        cont(a.pid)
    wait_for(lambda: "worker_id=a lost scheduler leadership" in a.output(), timeout=10, message=a.output())
    assert _leader(redis_client, keys) == "b"
    later = engine.tasks.enqueue("failure.work", queue="split", delay_seconds=3600).id
    assert _lease(redis_client, keys, later) == "b"
    now = int(time.time() * 1000)
    far = now + 7200_000  # as if the frozen leader's clock said the task were due
    partition = [keys.partition(tag_of(later))]
    assert engine.scripts("claimDue", keys=partition, args=["a", far, 500]) == ErrorCode.LEASE_LOST
    assert engine.scripts("enqueueDue", keys=partition,
                          args=["a", far, iso(far), 60_000, 1, 100, later]) == ErrorCode.LEASE_LOST
    assert engine.scripts("requeueStaleClaims", keys=partition, args=[far, far, "a"]) == ErrorCode.LEASE_LOST
    assert engine.scripts("recoverLostTasks", keys=partition,
                          args=["dtq", "a", far, iso(far), 60_000, 1, 100, far, 500]) == ErrorCode.LEASE_LOST
    assert statuses(redis_client, keys, [later]) == ["PENDING"]
    assert redis_client.zscore(keys.schedule(tag_of(later)), later)
    assert all(execs(redis_client, keys, tid) == 1 for tid in due)
    assert a.proc.poll() is None  # the old leader keeps working as a follower
