"""Sync handlers in the worker's handler threads (dtq_core/worker/threads.py), with real worker
processes: rows claimed ahead of a free slot (the backlog) are handed back at a drain without
running, and a thread that starts the next row itself still honours its handler timeout."""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..conftest import WorkerProcess, wait_for
from .support import env, execs, pending, started, status, statuses

pytestmark = pytest.mark.slow


def turn_over(engine: Engine, queue: str) -> None:
    """Quick tasks ahead of a test's own: a worker claims rows ahead of a busy slot only while its
    slots turn over (dtq_core/worker/turnover.py), as they do while it runs these."""
    for _ in range(3):
        engine.tasks.enqueue("failure.work", {"seconds": 0}, queue=queue)


def test_a_worker_busy_with_a_long_task_claims_nothing_ahead_of_it(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # Rows claimed behind a slot that stays busy would wait there while an idle peer could run
    # them: a worker whose slots stopped turning over keeps no backlog.
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "long", "--concurrency", "1", **env())
    long = engine.tasks.enqueue("failure.work", {"seconds": 6}, queue="long").id
    wait_for(lambda: started(redis_client, keys, long), message=a.output())  # no attempt of a's has ended
    nxt = engine.tasks.enqueue("failure.work", {"seconds": 0}, queue="long").id
    b = start_worker("--name", "b", "--queues", "long", **env())
    wait_for(lambda: status(redis_client, keys, nxt) == "SUCCEEDED", timeout=4, message=lambda: a.output() + b.output())
    assert engine.tasks.get(nxt)["worker_id"] == "b"
    assert status(redis_client, keys, long) == "RUNNING"  # a was busy throughout


def test_a_drain_hands_back_claimed_rows_it_never_started(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    keys = engine.keys
    turn_over(engine, "ahead")
    running = engine.tasks.enqueue("failure.work", {"seconds": 1.5}, queue="ahead").id
    waiting = engine.tasks.enqueue("failure.work", {"seconds": 0}, queue="ahead").id
    a = start_worker("--name", "a", "--queues", "ahead", "--concurrency", "1", **env(DTQ_DRAIN_TIMEOUT_S=10))
    wait_for(lambda: started(redis_client, keys, running), message=a.output())
    # Claimed into the backlog (one slot, busy): the fetch made it RUNNING, no handler ran it.
    wait_for(lambda: status(redis_client, keys, waiting) == "RUNNING", message=a.output())
    a.proc.send_signal(signal.SIGTERM)
    assert a.wait(15) == 0, a.output()
    assert "draining 1 attempt(s), handing back 1 not started" in a.output()
    assert status(redis_client, keys, running) == "SUCCEEDED"  # the running one finished in the drain
    # Back in its stream, uncharged: no attempt ran, so none is counted and no error is recorded.
    back = engine.tasks.get(waiting)
    assert (back["status"], back["attempt"], back["errors"]) == ("QUEUED", 0, [])
    assert execs(redis_client, keys, waiting) == 0 and pending(redis_client, keys, ["ahead"]) == 0

    b = start_worker("--name", "b", "--queues", "ahead", **env())
    wait_for(lambda: status(redis_client, keys, waiting) == "SUCCEEDED", timeout=20, message=b.output())
    done = engine.tasks.get(waiting)
    assert execs(redis_client, keys, waiting) == 1 and (done["attempt"], done["errors"]) == (1, [])


def test_a_paused_queue_puts_back_claimed_rows_it_never_started(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    keys = engine.keys
    turn_over(engine, "held")
    running = engine.tasks.enqueue("failure.work", {"seconds": 2}, queue="held").id
    waiting = engine.tasks.enqueue("failure.work", {"seconds": 0}, queue="held").id
    a = start_worker("--name", "a", "--queues", "held", "--concurrency", "1", **env())
    wait_for(lambda: started(redis_client, keys, running), message=a.output())
    wait_for(lambda: status(redis_client, keys, waiting) == "RUNNING", message=a.output())  # in the backlog
    engine.queues.pause("held", Actor.cli())
    wait_for(lambda: status(redis_client, keys, waiting) == "QUEUED", timeout=10, message=a.output())
    wait_for(lambda: status(redis_client, keys, running) == "SUCCEEDED", timeout=20, message=a.output())
    back = engine.tasks.get(waiting)
    assert (back["attempt"], back["errors"], execs(redis_client, keys, waiting)) == (0, [], 0)
    engine.queues.resume("held", Actor.cli())
    wait_for(lambda: status(redis_client, keys, waiting) == "SUCCEEDED", timeout=20, message=a.output())
    done = engine.tasks.get(waiting)
    assert execs(redis_client, keys, waiting) == 1 and (done["attempt"], done["errors"]) == (1, [])


def test_a_short_timeout_fires_on_an_attempt_a_thread_started_from_the_backlog(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    keys = engine.keys
    # One slot: the second task waits in the backlog and starts in the first one's thread.
    turn_over(engine, "chain")
    first = engine.tasks.enqueue("failure.work", {"seconds": 0.3}, queue="chain").id
    stuck = engine.tasks.enqueue("failure.work", {"seconds": 3}, queue="chain", timeout_seconds=0.2,
                                 max_attempts=1).id
    after = engine.tasks.enqueue("failure.work", {"seconds": 0}, queue="chain").id
    w = start_worker("--name", "w", "--queues", "chain", "--concurrency", "1", **env())
    wait_for(lambda: statuses(redis_client, keys, [first, stuck, after]) == ["SUCCEEDED", "DEAD_LETTERED",
                                                                               "SUCCEEDED"],
             timeout=20, message=lambda: f"{statuses(redis_client, keys, [first, stuck, after])} {w.output()}")
    error = engine.tasks.get(stuck)["errors"][0]
    assert error["error"] == "dtq.HandlerTimeout" and "time.sleep(" in error["traceback"]
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait(15) == 0, w.output()


def test_a_drain_hands_back_claimed_rows_at_once_not_after_its_running_ones(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # Held until the end of a long drain, a backlog row fell out of the heartbeats: a peer took it
    # as lost past the visibility timeout (2 s), charged an attempt and dead-lettered a task of
    # max_attempts=1 that never ran.
    keys = engine.keys
    turn_over(engine, "drainq")
    running = engine.tasks.enqueue("failure.work", {"seconds": 8}, queue="drainq").id  # past the visibility timeout
    waiting = engine.tasks.enqueue("failure.work", {"seconds": 0}, queue="drainq", max_attempts=1).id
    a = start_worker("--name", "a", "--queues", "drainq", "--concurrency", "1", **env(DTQ_DRAIN_TIMEOUT_S=20))
    wait_for(lambda: started(redis_client, keys, running), message=a.output)
    wait_for(lambda: status(redis_client, keys, waiting) == "RUNNING", message=a.output)  # in a's backlog
    assert execs(redis_client, keys, waiting) == 0
    b = start_worker("--name", "b", "--queues", "drainq", **env())
    wait_for(lambda: redis_client.zscore(keys.workers(), "b") is not None, message=b.output)
    a.proc.send_signal(signal.SIGTERM)
    # Put back at once, uncharged, while a's running task drains: b runs it long before that ends.
    wait_for(lambda: status(redis_client, keys, waiting) == "SUCCEEDED", timeout=4,
             message=lambda: f"{status(redis_client, keys, waiting)} {a.output()} {b.output()}")
    assert status(redis_client, keys, running) == "RUNNING"  # still draining
    done = engine.tasks.get(waiting)
    assert (done["worker_id"], done["attempt"], done["errors"]) == ("b", 1, [])
    assert a.wait(30) == 0, a.output()
    assert status(redis_client, keys, running) == "SUCCEEDED"


@pytest.mark.parametrize("handler", ["failure.work", "failure.awork"], ids=["sync", "async"])
def test_a_task_cancelled_while_in_the_backlog_never_starts_and_ends_cancelled(
        handler: str, engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    keys = engine.keys
    turn_over(engine, "cq")
    running = engine.tasks.enqueue("failure.work", {"seconds": 4}, queue="cq").id
    waiting = engine.tasks.enqueue(handler, {"seconds": 0}, queue="cq").id
    w = start_worker("--name", "w", "--queues", "cq", "--concurrency", "1", **env())
    wait_for(lambda: started(redis_client, keys, running), message=w.output)
    wait_for(lambda: status(redis_client, keys, waiting) == "RUNNING", message=w.output)  # in the backlog
    assert execs(redis_client, keys, waiting) == 0
    engine.tasks.cancel(waiting, Actor.cli())
    # A backlog row is RUNNING: its cancel is seen within the watcher's poll (0.25 s), and as it
    # never started, it goes back (returnEntries) and ends CANCELLED while its slot is still busy.
    wait_for(lambda: status(redis_client, keys, waiting) == "CANCELLED", timeout=2,
             message=lambda: f"{status(redis_client, keys, waiting)} {w.output()}")
    assert status(redis_client, keys, running) == "RUNNING"
    wait_for(lambda: status(redis_client, keys, running) == "SUCCEEDED", timeout=20, message=w.output)
    assert execs(redis_client, keys, waiting) == 0 and pending(redis_client, keys, ["cq"]) == 0
    w.proc.send_signal(signal.SIGTERM)
    assert w.wait(15) == 0, w.output()
