"""An API host whose clock is off (run for real under libfaketime in its own process), talking to
workers that keep Redis's clock (RedisAlignedClock). The engine's own contract (engine/plumbing.py,
Noun.redis_now_ms) is that an API process compares and writes times workers act on by Redis's
TIME, because "the host of an API or CLI process may be off (no NTP, a VM resumed)": run-now
(runTaskNow reads Redis's TIME) and the workers view included."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dtq_core.engine import Engine
from dtq_core.keys import tag_of

from ..conftest import ROOT, WorkerProcess, wait_for, worker_env
from .support import env, status, task
from .test_clock_skew import LIBFAKETIME, _skewed

pytestmark = pytest.mark.slow

SKEW_S = 3600  # the API host is an hour ahead

CLIENT = """
import json, sys, django
django.setup()
from django.test import Client
method, path = sys.argv[1], sys.argv[2]
c = Client(SERVER_NAME="localhost")
r = c.post(path, content_type="application/json") if method == "POST" else c.get(path)
print(json.dumps({"status": r.status_code, "body": r.content.decode()}))
"""


def _api(engine: Engine, redis_url: str, method: str, path: str) -> dict[str, Any]:
    """One request served by a real API process (Django, dtq_site settings) on a host SKEW_S ahead."""
    e = worker_env(redis_url, engine.config.key_prefix, DTQ_ALLOW_ANONYMOUS_ADMIN="true", **_skewed(SKEW_S))
    out = subprocess.run([sys.executable, "-c", CLIENT, method, path], cwd=ROOT, env=e, capture_output=True,
                         text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    reply = json.loads(out.stdout.strip().splitlines()[-1])
    reply["json"] = json.loads(reply["body"]) if reply["body"] else None
    return reply


@pytest.fixture
def skew_ok() -> None:
    if LIBFAKETIME is None:
        pytest.skip("libfaketime not found")


def test_run_now_from_an_api_host_whose_clock_is_ahead_runs_the_task_now(
        skew_ok: None, engine: Engine, redis_server: Any, redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    # docs/api.md: POST /tasks/<id>/run-now: "A delayed task ... becomes due now ... the scheduler
    # leader queues it in its next round". The leader compares due times with Redis's clock: had
    # the API written its own host's now, "run now" from a host an hour ahead would move a task
    # due in 2 minutes to an hour from now.
    engine = Engine(engine.config)
    keys = engine.keys
    w = start_worker("--name", "w", "--queues", "rn", **env())
    wait_for(lambda: redis_client.get(keys.leader()) == "w", timeout=30, message=w.output)
    tid = engine.tasks.enqueue("failure.work", queue="rn", delay_seconds=120).id
    before = redis_client.zscore(keys.schedule(tag_of(tid)), tid)
    reply = _api(engine, redis_server.url, "POST", f"/api/v1/tasks/{tid}/run-now")
    assert reply["status"] == 202, reply
    after = redis_client.zscore(keys.schedule(tag_of(tid)), tid)
    try:
        wait_for(lambda: status(redis_client, keys, tid) == "SUCCEEDED", timeout=10, message=w.output)
    except AssertionError:
        record = task(redis_client, keys, tid)
        raise AssertionError(
            f"run-now left the task {record.get('status')}: its due time moved from "
            f"{(before - engine.clock.now_ms()) / 1000:+.0f}s to {(after - engine.clock.now_ms()) / 1000:+.0f}s "
            "from now") from None


def test_workers_view_from_an_api_host_whose_clock_is_ahead_shows_live_workers_alive(
        skew_ok: None, engine: Engine, redis_server: Any, redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    # docs/api.md: alive = heartbeat younger than DTQ_VISIBILITY_TIMEOUT_S; a worker listed lost
    # cannot be told to stop (404). The worker heartbeats on Redis's clock: compared with the API
    # host's, every live worker would be "lost" from a host off by more than the visibility
    # timeout, and could not be stopped or quieted.
    keys = engine.keys
    w = start_worker("--name", "w", "--queues", "wv", **env())
    wait_for(lambda: redis_client.zscore(keys.workers(), "w") is not None, timeout=30, message=w.output)
    listed = _api(engine, redis_server.url, "GET", "/api/v1/workers")
    assert listed["status"] == 200, listed
    row = next(r for r in listed["json"]["results"] if r["id"] == "w")
    stop = _api(engine, redis_server.url, "POST", "/api/v1/workers/w/quiet")
    assert w.proc.poll() is None
    assert (row["alive"], row["state"], stop["status"]) == (True, "running", 202), (row, stop)
