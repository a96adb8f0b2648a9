"""Crashes at a chosen point of the worker, not by chance: DTQ_TEST_FAULT stops a real
runworker_dtq process right after a script returned (SIGSTOP), and the test SIGKILLs it there."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import Events, counter, depth, env, execs, outcomes, pending, started, status, stopped, total

pytestmark = pytest.mark.slow


def test_a_worker_killed_right_after_its_completion_was_acknowledged_leaves_it_done_once(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the finished task, exactly as it finished. completeTasks wrote SUCCEEDED
    # and the result and XACKed in one script; the process dies right after. A peer reclaims the
    # other task the dead worker was running (so its reaper has been over that stream), but never
    # runs the finished one again, and nothing is counted twice.
    engine, keys = live_engine, live_engine.keys
    a = start_worker("--name", "a", "--queues", "acked", **env(DTQ_TEST_FAULT="after_complete"))
    with Events(redis_client, keys) as events:
        running = engine.tasks.enqueue("failure.awork", {"by_attempt": {"1": 60, "2": 0}}, queue="acked").id
        wait_for(lambda: started(redis_client, keys, running), timeout=30, message=a.output)
        done = engine.tasks.enqueue("failure.work", {}, queue="acked").id
        wait_for(lambda: stopped(a.pid), timeout=15, message=a.output)
        assert status(redis_client, keys, done) == "SUCCEEDED"
        assert pending(redis_client, keys, ["acked"]) == 1  # only the running task's entry
        a.kill()
        b = start_worker("--name", "b", "--queues", "acked", **env())
        wait_for(lambda: status(redis_client, keys, running) == "SUCCEEDED", timeout=30, message=b.output)
        events.sync()
        assert events.count("task.succeeded", done) == 1 and events.count("task.started", done) == 1
    record = engine.tasks.get(done)
    assert (record["status"], record["attempt"], record["worker_id"]) == ("SUCCEEDED", 1, "a")
    assert record["result"]["attempt"] == 1 and record["errors"] == []
    assert execs(redis_client, keys, done) == 1
    assert execs(redis_client, keys, running) == 2 and engine.tasks.get(running)["worker_id"] == "b"
    assert pending(redis_client, keys, ["acked"]) == 0 and total(redis_client, keys, keys.running) == 0
    assert depth(redis_client, keys, "acked") == 0
    assert counter(redis_client, keys, "redeliveries") == 1  # the running task's, not the finished one's
    assert counter(redis_client, keys, "absorbed") == 0 and counter(redis_client, keys, "fenced") == 0
    assert outcomes(redis_client, keys)["acked|failure.work|succeeded"] == 1
