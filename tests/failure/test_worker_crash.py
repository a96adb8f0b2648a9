"""Worker processes SIGKILLed mid-task, between the hash update and the XACK, and by a poison
task that kills every worker that runs it. Real redis-server, real runworker_dtq processes."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import counter, dead_letters, env, execs, outcomes, pending, registered, started, status, task, total

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("task_type", ["failure.work", "failure.awork"], ids=["sync", "async"])
def test_a_task_whose_worker_is_killed_mid_run_runs_again_on_a_peer(
        task_type: str, engine: Engine, redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the task. A peer reclaims the entry after the visibility timeout, counts
    # the lost attempt and runs attempt 2, which succeeds; nothing is left pending.
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "crash", **env())
    tid = engine.tasks.enqueue(task_type, {"by_attempt": {"1": 60, "2": 0}}, queue="crash").id
    wait_for(lambda: started(redis_client, keys, tid), message=a.output())
    a.kill()
    b = start_worker("--name", "b", "--queues", "crash", **env())
    wait_for(lambda: status(redis_client, keys, tid) == "SUCCEEDED", timeout=20, message=b.output())
    task = engine.tasks.get(tid)
    assert task["attempt"] == 2 and task["worker_id"] == "b" and task["result"]["attempt"] == 2
    assert [e["error"] for e in task["errors"]] == ["dtq.WorkerLost"]
    assert execs(redis_client, keys, tid) == 2  # at-least-once: the killed run plus the redelivery
    assert counter(redis_client, keys, "redeliveries") == 1
    assert pending(redis_client, keys, ["crash"]) == 0
    assert total(redis_client, keys, keys.running) == 0


@pytest.mark.parametrize("outcome", ["succeeded", "retrying"])
def test_a_crash_after_the_hash_update_but_before_xack_is_absorbed_not_rerun(
        outcome: str, engine: Engine, redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the recorded outcome. The handler writes the outcome to the hash as a
    # completion would, then SIGKILLs its own worker before the XACK. On redelivery the peer sees
    # a terminal (or RETRYING) status and ACKs without executing attempt 1 again.
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "ack", **env())
    tid = engine.tasks.enqueue("failure.crash_after_write", {"outcome": outcome}, queue="ack").id
    assert a.wait(30) != 0  # killed by its own handler
    assert status(redis_client, keys, tid) == outcome.upper()
    assert pending(redis_client, keys, ["ack"]) == 1  # the entry was never acknowledged
    b = start_worker("--name", "b", "--queues", "ack", **env())
    wait_for(lambda: pending(redis_client, keys, ["ack"]) == 0 and counter(redis_client, keys, "absorbed") >= 1,
             timeout=20, message=b.output())
    wait_for(lambda: status(redis_client, keys, tid) == "SUCCEEDED", timeout=20, message=b.output())
    task = engine.tasks.get(tid)
    runs = [line.split("|")[1] for line in redis_client.lrange(f"{keys.prefix}:testlog:runs", 0, -1)]
    if outcome == "succeeded":
        assert task["attempt"] == 1 and runs == ["1"]  # never executed again
    else:
        assert task["attempt"] == 2 and runs == ["1", "2"]  # only the scheduled retry ran
    assert counter(redis_client, keys, "redeliveries") == 0
    assert pending(redis_client, keys, ["ack"]) == 0


def test_a_task_that_kills_every_worker_is_dead_lettered_after_its_attempts(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the fleet. Each crash counts as an attempt; after max_attempts the poison
    # task goes to the DLQ instead of killing workers forever.
    keys = engine.keys
    workers = [start_worker("--name", "w0", "--queues", "poison", **env())]
    tid = engine.tasks.enqueue("failure.kill_self", queue="poison", max_attempts=2).id

    def dead_lettered_while_restarting_workers() -> bool:
        if workers[-1].proc.poll() is not None:  # a supervisor restarts the crashed worker
            workers.append(start_worker("--name", f"w{len(workers)}", "--queues", "poison", **env()))
        return status(redis_client, keys, tid) == "DEAD_LETTERED"

    wait_for(dead_lettered_while_restarting_workers, timeout=40, interval=0.1,
             message="\n".join(w.output() for w in workers))
    task = engine.tasks.get(tid)
    assert task["attempt"] == 2 and execs(redis_client, keys, tid) == 2
    assert [e["error"] for e in task["errors"]] == ["dtq.WorkerLost", "dtq.WorkerLost"]
    (entry,) = dead_letters(redis_client, keys)
    assert entry[1]["task_id"] == tid and entry[1]["error_class"] == "dtq.WorkerLost"
    # Counted for dtq_tasks_total like any other dead letter, though no handler ever finished.
    assert outcomes(redis_client, keys)["poison|failure.kill_self|dead_lettered"] == 1
    assert pending(redis_client, keys, ["poison"]) == 0
    assert workers[-1].proc.poll() is None and registered(redis_client, keys, f"w{len(workers) - 1}")


def test_a_dead_workers_entry_behind_hundreds_of_live_ones_is_reclaimed_in_time(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the reclaim deadline. A live worker holds 300 long attempts of the same
    # stream, ahead of the dead worker's entry in the pending list; the peer, with 2 free slots,
    # still finds the dead one within the visibility timeout plus one reaper period.
    keys = engine.keys
    live = start_worker("--name", "live", "--queues", "deep", "--concurrency", "300", **env())
    held = [engine.tasks.enqueue("failure.awork", {"seconds": 120}, queue="deep").id for _ in range(300)]
    wait_for(lambda: len(execs(redis_client, keys)) == 300, timeout=60, message=live.output())
    dead = start_worker("--name", "dead", "--queues", "deep", **env())
    tid = engine.tasks.enqueue("failure.awork", {"by_attempt": {"1": 120, "2": 0}}, queue="deep").id
    wait_for(lambda: started(redis_client, keys, tid), message=dead.output())
    assert task(redis_client, keys, tid)["worker_id"] == "dead"  # the live worker has no free slot
    peer = start_worker("--name", "peer", "--queues", "deep", "--concurrency", "2", **env())
    wait_for(lambda: "started queues" in peer.output(), message=peer.output())
    dead.kill()
    killed = time.monotonic()
    wait_for(lambda: task(redis_client, keys, tid)["attempt"] == "2", timeout=30, interval=0.05,
             message=peer.output())
    took = time.monotonic() - killed
    visibility, reaper_period = 2, 0.5
    assert took < visibility + reaper_period + 5, took  # the margin is for a loaded machine; it was 120 s
    wait_for(lambda: status(redis_client, keys, tid) == "SUCCEEDED", timeout=10, message=peer.output())
    assert task(redis_client, keys, tid)["worker_id"] == "peer"
    # The live worker's attempts stay its own: only the dead worker's was redelivered.
    assert counter(redis_client, keys, "redeliveries") == 1
    assert {task(redis_client, keys, t)["worker_id"] for t in held} == {"live"}
    assert all(task(redis_client, keys, t)["attempt"] == "1" for t in held)
