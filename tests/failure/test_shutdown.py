"""SIGTERM with work in flight: stop taking work, hand the leader lock back, drain within
DTQ_DRAIN_TIMEOUT_S, leave unfinished entries to peers, deregister, exit 0. A second signal
exits at once."""

from __future__ import annotations

import signal
import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import counter, env, execs, partitions, pending, registered, spans, started, status, statuses, task

pytestmark = pytest.mark.slow


def test_sigterm_drains_in_flight_work_and_leaves_the_rest_to_peers(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: finished work (written), unfinished work (left pending for a peer, which
    # runs it again), work queued after the signal (untouched by the draining worker).
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "drain", "--concurrency", "4", **env(DTQ_DRAIN_TIMEOUT_S=2))
    wait_for(lambda: redis_client.get(keys.leader()) == "a", message=a.output())
    wait_for(lambda: (tags := partitions(redis_client, keys, ["drain"]))
             and all(redis_client.get(keys.lock(tag)) == "a" for tag in tags), message=a.output())
    short = engine.tasks.enqueue("failure.work", {"seconds": 1}, queue="drain").id
    long_async = engine.tasks.enqueue("failure.awork", {"by_attempt": {"1": 60, "2": 0}}, queue="drain").id
    long_sync = engine.tasks.enqueue("failure.work", {"by_attempt": {"1": 6, "2": 0}}, queue="drain").id
    wait_for(lambda: started(redis_client, keys, short, long_async, long_sync), message=a.output())
    a.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    wait_for(lambda: "stopped taking work" in a.output(), timeout=10, message=a.output())
    late = engine.tasks.enqueue("failure.work", queue="drain").id
    wait_for(lambda: "drain timeout: abandoning 2 attempt(s)" in a.output(), timeout=2 + 4, message=a.output())
    # The async handler is cancelled at the deadline; the sync one runs on, detached, to its end
    # (the worker waits for it, still holding its entry), and its result is discarded.
    wait_for(lambda: "1 sync handler(s) still running" in a.output(), timeout=10, message=a.output())
    assert a.wait(15) == 0, a.output()
    assert time.monotonic() - signalled < 6 + 4
    assert "detached sync handlers finished" in a.output()  # it ended by itself: waited for, not cut off
    assert status(redis_client, keys, short) == "SUCCEEDED"
    assert statuses(redis_client, keys, [long_async, long_sync]) == ["RUNNING"] * 2  # left for peers
    assert pending(redis_client, keys, ["drain"]) == 2
    assert status(redis_client, keys, late) == "QUEUED" and execs(redis_client, keys, late) == 0
    assert not registered(redis_client, keys, "a") and redis_client.get(keys.leader()) is None
    assert all(redis_client.get(keys.lock(tag)) is None for tag in partitions(redis_client, keys))  # leases too

    b = start_worker("--name", "b", "--queues", "drain", **env())
    wait_for(lambda: set(statuses(redis_client, keys, [long_async, long_sync, late])) == {"SUCCEEDED"},
             timeout=20, message=b.output())
    assert [engine.tasks.get(t)["attempt"] for t in (long_async, long_sync, late)] == [2, 2, 1]
    assert execs(redis_client, keys, short) == 1 and execs(redis_client, keys, late) == 1
    assert pending(redis_client, keys, ["drain"]) == 0


def test_a_second_signal_exits_at_once(engine: Engine, redis_client: redis.Redis,
                                       start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the operator's patience. A long drain is cut short by a second signal;
    # the abandoned entry stays pending for a peer.
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "twice", **env(DTQ_DRAIN_TIMEOUT_S=60))
    tid = engine.tasks.enqueue("failure.awork", {"seconds": 60}, queue="twice").id
    wait_for(lambda: started(redis_client, keys, tid), message=a.output())
    a.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "stop requested" in a.output(), timeout=10, message=a.output())
    second = time.monotonic()
    a.proc.send_signal(signal.SIGINT)
    assert a.wait(5) == 1
    assert time.monotonic() - second < 2
    assert "second signal: exiting now" in a.output()
    assert pending(redis_client, keys, ["twice"]) == 1 and status(redis_client, keys, tid) == "RUNNING"


def test_a_shutdown_waits_for_sync_handlers_only_up_to_their_own_timeout(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the operator's stop, whatever a wedged sync handler does. One that its
    # timeout already gave up on (attempt 2 succeeded since) is not waited for at all; one the
    # drain left is waited for until its handler timeout, then the process exits without it.
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "wedged", **env(DTQ_DRAIN_TIMEOUT_S=1))
    timed_out = engine.tasks.enqueue("failure.work", {"by_attempt": {"1": 60, "2": 0}}, queue="wedged",
                                     timeout_seconds=1).id
    wait_for(lambda: status(redis_client, keys, timed_out) == "SUCCEEDED", timeout=20, message=a.output())
    stuck = engine.tasks.enqueue("failure.work", {"seconds": 60}, queue="wedged", timeout_seconds=4).id
    wait_for(lambda: started(redis_client, keys, stuck), message=a.output())
    a.proc.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    assert a.wait(20) == 0, a.output()
    assert time.monotonic() - signalled < 4 + 3  # its 4 s timeout, not the 60 s it would sleep
    assert "1 sync handler(s) still running" in a.output()  # the stuck one; not the timed-out one
    assert "1 detached sync handler(s) past their timeout: exiting without them" in a.output()
    assert status(redis_client, keys, stuck) == "RUNNING" and pending(redis_client, keys, ["wedged"]) == 1


def test_a_clean_drain_writes_each_result_once_and_reports_nothing_discarded(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the log's word. Attempts that finish inside the drain window are written
    # once; none is reported as "result discarded: a newer attempt owns it" (that line means a
    # stale worker lost a task to a peer, and an operator would go looking for one).
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "clean", "--concurrency", "8", **env(DTQ_DRAIN_TIMEOUT_S=20))
    ids = [engine.tasks.enqueue(kind, {"seconds": 1 + i / 10}, queue="clean").id
           for i, kind in enumerate(["failure.work", "failure.awork"] * 3)]
    wait_for(lambda: started(redis_client, keys, *ids), message=a.output())
    a.proc.send_signal(signal.SIGTERM)
    assert a.wait(20) == 0, a.output()
    assert statuses(redis_client, keys, ids) == ["SUCCEEDED"] * len(ids)
    assert [task(redis_client, keys, t)["attempt"] for t in ids] == ["1"] * len(ids)
    assert "result discarded" not in a.output()
    assert "re-sent" not in a.output()  # each completion written once, not cut off and sent again
    assert counter(redis_client, keys, "fenced") == 0
    assert pending(redis_client, keys, ["clean"]) == 0


def test_a_sync_handler_outliving_the_drain_keeps_its_lease_while_a_peer_runs(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: one attempt at a time. The drained worker's sync handler runs on past the
    # drain window in its thread; the worker keeps that entry's lease (heartbeats) until the thread
    # ends, so the peer, running all along, starts the next attempt only after the first ended.
    keys = engine.keys
    procs = {name: start_worker("--name", name, "--queues", "overlap", **env(DTQ_DRAIN_TIMEOUT_S=1))
             for name in ("a", "b")}
    for proc in procs.values():
        wait_for(lambda proc=proc: "started queues" in proc.output(), timeout=30, message=proc.output)
    tid = engine.tasks.enqueue("failure.timed", {"by_attempt": {"1": 8, "2": 0}}, queue="overlap").id
    wait_for(lambda: started(redis_client, keys, tid), message=procs["a"].output)
    owner_name = task(redis_client, keys, tid)["worker_id"]
    owner, peer = procs[owner_name], procs["b" if owner_name == "a" else "a"]
    owner.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: "1 sync handler(s) still running" in owner.output(), timeout=10, message=owner.output)
    state = redis_client.hget(keys.worker(owner_name), "state")
    still_registered = registered(redis_client, keys, owner_name)
    if "end" not in spans(redis_client, keys, tid)[1]:  # read while its thread ran: registered, and saying so
        assert (state, still_registered) == ("draining", True)
    wait_for(lambda: status(redis_client, keys, tid) == "SUCCEEDED", timeout=30,
             message=lambda: owner.output() + peer.output())
    wait_for(lambda: owner.proc.poll() is not None, timeout=20, message=owner.output)
    assert owner.wait() == 0, owner.output()
    first, second = spans(redis_client, keys, tid)[1], spans(redis_client, keys, tid)[2]
    assert first["end"] - first["start"] >= 8 - 0.1  # it ran to its end, past the 1 s drain window
    assert second["start"] >= first["end"], (first, second)  # no overlap
    # Handed back once it stopped: the peer took it within a reaper period or so, not a timeout later.
    assert second["start"] - first["end"] < 2 + 3, (first, second)
    # As failure-modes.md says: the abandoned attempt counts as a lost one, the peer's succeeds.
    result = engine.tasks.get(tid)
    assert result["attempt"] == 2 and result["worker_id"] != owner_name
    assert [e["error"] for e in result["errors"]] == ["dtq.WorkerLost"]
    assert execs(redis_client, keys, tid) == 2 and pending(redis_client, keys, ["overlap"]) == 0
    assert not registered(redis_client, keys, owner_name)
