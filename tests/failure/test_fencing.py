"""Ownership of in-flight work: a live owner keeps its entries (even ones deleted from the stream),
a worker paused past the visibility timeout is fenced out, and RUNNING tasks whose entry was
trimmed away while their owner died are recovered from the task hash."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine
from dtq_core.keys import tag_of

from ..conftest import WorkerProcess, wait_for
from .support import cont, counter, env, execs, pending, started, status, stop, task, total

pytestmark = pytest.mark.slow


def test_a_worker_paused_past_the_visibility_timeout_cannot_overwrite_the_newer_attempt(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the newer attempt's state, result and entry. The paused worker's late
    # completion is refused inside the completion script ("fenced"), nothing it writes lands.
    keys = engine.keys
    procs = {name: start_worker("--name", name, "--queues", "fence", **env()) for name in ("a", "b")}
    tid = engine.tasks.enqueue("failure.work", {"by_attempt": {"1": 1.0, "2": 2.5}}, queue="fence").id
    wait_for(lambda: started(redis_client, keys, tid), message=procs["a"].output())
    owner = task(redis_client, keys, tid)["worker_id"]
    peer = "b" if owner == "a" else "a"
    stop(procs[owner].pid)
    try:
        wait_for(lambda: task(redis_client, keys, tid).get("attempt") == "2", timeout=15,
                 message=procs[peer].output())
    finally:
        cont(procs[owner].pid)
    wait_for(lambda: counter(redis_client, keys, "fenced") >= 1, timeout=10, message=procs[owner].output())
    newer = task(redis_client, keys, tid)
    assert newer["status"] == "RUNNING" and newer["attempt"] == "2" and newer["worker_id"] == peer
    assert redis_client.get(keys.result(tid)) is None  # the stale attempt stored no result
    assert pending(redis_client, keys, ["fence"]) == 1  # ...and did not ACK the peer's entry
    wait_for(lambda: status(redis_client, keys, tid) == "SUCCEEDED", timeout=15)
    final = engine.tasks.get(tid)
    assert final["attempt"] == 2 and final["worker_id"] == peer and final["result"]["attempt"] == 2
    assert pending(redis_client, keys, ["fence"]) == 0
    assert procs[owner].proc.poll() is None  # the paused worker carried on by itself
    assert "result discarded: a newer attempt owns it" in procs[owner].output()


def test_live_owners_keep_long_tasks_even_when_their_entry_is_deleted(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: single execution while the owner lives. Both tasks run for twice the
    # visibility timeout next to an idle peer; one entry is XDELed while pending. Heartbeats keep
    # the intact entry fresh and the task's running-index score fresh, so neither runs twice.
    keys = engine.keys
    procs = [start_worker("--name", name, "--queues", "long", **env()) for name in ("a", "b")]
    intact = engine.tasks.enqueue("failure.awork", {"seconds": 4}, queue="long").id
    deleted = engine.tasks.enqueue("failure.awork", {"seconds": 4}, queue="long").id
    wait_for(lambda: started(redis_client, keys, deleted, intact), message=procs[0].output())
    row = task(redis_client, keys, deleted)
    assert redis_client.xdel(keys.stream(tag_of(deleted), "long", row["priority"]), row["entry_id"]) == 1
    wait_for(lambda: status(redis_client, keys, deleted) == "SUCCEEDED" == status(redis_client, keys, intact),
             timeout=15, message="\n".join(p.output() for p in procs))
    for tid in (intact, deleted):
        assert engine.tasks.get(tid)["attempt"] == 1 and execs(redis_client, keys, tid) == 1
    assert counter(redis_client, keys, "redeliveries") == 0
    assert pending(redis_client, keys, ["long"]) == 0 and total(redis_client, keys, keys.running) == 0


def test_a_running_task_whose_entry_was_trimmed_is_recovered_from_the_hash(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the task, although its stream entry is gone. The owner dies after the
    # stream was trimmed; the reaper can only find the entry deleted, so the leader's sweep
    # finds the task in the running index and queues attempt 2 from the hash.
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "trim", **env())
    tid = engine.tasks.enqueue("failure.work", {"by_attempt": {"1": 60, "2": 0}}, queue="trim").id
    wait_for(lambda: started(redis_client, keys, tid), message=a.output())
    stream = keys.stream(tag_of(tid), "trim", task(redis_client, keys, tid)["priority"])
    redis_client.xtrim(stream, maxlen=0)
    a.kill()
    b = start_worker("--name", "b", "--queues", "trim", **env())
    wait_for(lambda: status(redis_client, keys, tid) == "SUCCEEDED", timeout=25, message=b.output())
    final = engine.tasks.get(tid)
    assert final["attempt"] == 2 and final["worker_id"] == "b"
    assert [e["error"] for e in final["errors"]] == ["dtq.WorkerLost"]
    assert execs(redis_client, keys, tid) == 2
    assert pending(redis_client, keys, ["trim"]) == 0 and total(redis_client, keys, keys.running) == 0
    assert "requeued 1 running task(s) whose stream entry was lost" in b.output()
