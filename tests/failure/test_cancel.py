"""Cancel at every status, through the API, against real workers: waiting tasks never start,
running ones stop within the cancel poll, and a cancel survives the death of its worker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis
from django.test import Client

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import cont, depth, env, execs, pending, schedule_score, started, status, stop

# The API cancels below come from a script with no key: the operator's explicit opt-in.
pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("anonymous_admin")]


def _cancel(client: Client, task_id: str) -> tuple[int, dict]:
    response = client.post(f"/api/v1/tasks/{task_id}/cancel")
    return response.status_code, response.json()


def test_waiting_tasks_are_cancelled_at_once_and_finished_ones_refuse(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the cancel. PENDING, QUEUED and RETRYING tasks become CANCELLED at once
    # and never start (the queued task's stream entry goes with it); a finished task answers 409.
    keys, client = live_engine.keys, Client()
    pending_id = live_engine.tasks.enqueue("failure.work", queue="cq", delay_seconds=60).id
    queued_id = live_engine.tasks.enqueue("failure.work", queue="cq").id
    for tid in (pending_id, queued_id):
        code, body = _cancel(client, tid)
        assert code == 202 and body["status"] == "CANCELLED", body
    assert schedule_score(redis_client, keys, pending_id) is None
    assert depth(redis_client, keys, "cq") == 0  # nothing left for a worker to read
    # Retries back off up to an hour here, so the RETRYING task stays in the schedule.
    a = start_worker("--name", "a", "--queues", "cq", **env(DTQ_RETRY_BASE_S=3600, DTQ_RETRY_MAX_S=3600))
    done = live_engine.tasks.enqueue("failure.work", queue="cq").id
    retrying = live_engine.tasks.enqueue("dtq.flaky", {"fail_times": 1}, queue="cq").id
    wait_for(lambda: status(redis_client, keys, done) == "SUCCEEDED", message=a.output())
    wait_for(lambda: status(redis_client, keys, retrying) == "RETRYING", message=a.output())
    code, body = _cancel(client, retrying)
    assert code == 202 and body["status"] == "CANCELLED", body
    assert schedule_score(redis_client, keys, retrying) is None
    wait_for(lambda: pending(redis_client, keys, ["cq"]) == 0)
    assert execs(redis_client, keys, queued_id) == 0 and execs(redis_client, keys, pending_id) == 0
    assert status(redis_client, keys, queued_id) == "CANCELLED"
    assert live_engine.tasks.get(retrying)["attempt"] == 1  # the retry never ran
    code, body = _cancel(client, done)
    assert code == 409 and body["error"]["code"] == "TASK_TERMINAL"


@pytest.mark.parametrize("task_type", ["failure.awork", "failure.work"], ids=["async", "sync"])
def test_a_running_task_is_cancelled_within_the_poll(task_type: str, live_engine: Engine,
                                                     redis_client: redis.Redis,
                                                     start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the worker (it keeps serving) and the cancel (no result is stored even
    # though a sync handler's thread runs on, detached).
    keys, client = live_engine.keys, Client()
    a = start_worker("--name", "a", "--queues", "cr", **env())
    tid = live_engine.tasks.enqueue(task_type, {"seconds": 3}, queue="cr").id
    wait_for(lambda: started(redis_client, keys, tid), message=a.output())
    code, body = _cancel(client, tid)
    asked = time.monotonic()
    assert code == 202 and body["status"] == "RUNNING", body
    wait_for(lambda: status(redis_client, keys, tid) == "CANCELLED", timeout=5, message=a.output())
    assert time.monotonic() - asked < 1.5  # the 0.25 s poll plus the completion flush
    after = live_engine.tasks.enqueue("failure.work", queue="cr").id
    wait_for(lambda: status(redis_client, keys, after) == "SUCCEEDED", message=a.output())
    assert status(redis_client, keys, tid) == "CANCELLED" and redis_client.get(keys.result(tid)) is None
    assert execs(redis_client, keys, tid) == 1 and pending(redis_client, keys, ["cr"]) == 0


@pytest.mark.parametrize("then", ["resume", "kill"])
def test_a_cancel_in_flight_answers_409_and_survives_its_worker(then: str, live_engine: Engine,
                                                                redis_client: redis.Redis,
                                                                start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: the recorded cancel. While the owner is frozen the cancel stays in flight
    # (409 CANCEL_REQUESTED); resumed, the owner cancels it; killed, the peer that reclaims the
    # entry honours the cancel instead of running the task again.
    keys, client = live_engine.keys, Client()
    a = start_worker("--name", "a", "--queues", "cf", **env())
    tid = live_engine.tasks.enqueue("failure.awork", {"seconds": 30}, queue="cf").id
    wait_for(lambda: started(redis_client, keys, tid), message=a.output())
    stop(a.pid)
    try:
        assert _cancel(client, tid)[0] == 202
        code, body = _cancel(client, tid)
        assert code == 409 and body["error"]["code"] == "CANCEL_REQUESTED", body
    finally:
        if then == "resume":
            cont(a.pid)
        else:
            a.kill()
    if then == "kill":
        b = start_worker("--name", "b", "--queues", "cf", **env())
        wait_for(lambda: status(redis_client, keys, tid) == "CANCELLED", timeout=15, message=b.output())
    else:
        wait_for(lambda: status(redis_client, keys, tid) == "CANCELLED", timeout=5, message=a.output())
    assert execs(redis_client, keys, tid) == 1  # never started again
    wait_for(lambda: pending(redis_client, keys, ["cf"]) == 0)
    code, body = _cancel(client, tid)
    assert code == 409 and body["error"]["code"] == "TASK_TERMINAL"
