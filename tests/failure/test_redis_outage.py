"""Redis outages with a private redis-server per test: frozen (SIGSTOP/SIGCONT) and crashed
(kill -9, restarted on the same port and directory with AOF). Workers recover on their own; the
API answers 503 REDIS_UNAVAILABLE within 2 s and /ready recovers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.test import Client

from dtq_core.conf import get_engine
from dtq_core.keys import Keys

from ..conftest import WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer
from .support import dead_letters, env, execs, pending, registered, started, statuses, task, total

pytestmark = pytest.mark.slow


@pytest.fixture
def private(tmp_path: Path, settings: Any) -> Iterator[tuple[RedisServer, Keys]]:
    """A redis-server of this test's own (AOF on), with Django's settings pointed at it."""
    prefix = f"dtqtest:{uuid4().hex[:12]}"
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": prefix}
    try:
        yield server, Keys(prefix)
    finally:
        server.stop()


def _worker(server: RedisServer, keys: Keys, tmp_path: Path, name: str, **overrides: Any) -> WorkerProcess:
    return WorkerProcess(["--name", name, "--queues", "out"],
                         worker_env(server.url, keys.prefix, **env(**overrides)), tmp_path / f"{name}.log")


def _assert_unavailable_fast(client: Client, task_id: str) -> None:
    """/ready, submit and a read each answer 503 REDIS_UNAVAILABLE within 2 s, never hang or 500."""
    for method, path, body in (("get", "/ready", None), ("post", "/api/v1/tasks", {"type": "failure.work"}),
                               ("get", f"/api/v1/tasks/{task_id}", None)):
        started = time.monotonic()
        response = getattr(client, method)(path, body, content_type="application/json") if body \
            else getattr(client, method)(path)
        assert time.monotonic() - started < 2, path
        assert response.status_code == 503 and response.json()["error"]["code"] == "REDIS_UNAVAILABLE", path


def _ready(client: Client) -> bool:
    return client.get("/ready").status_code == 200


def test_a_frozen_redis_fails_the_api_fast_and_everyone_recovers(
        private: tuple[RedisServer, Keys], tmp_path: Path) -> None:
    # It should survive: every task (none lost or stuck pending) and the worker process, with no
    # manual step after Redis thaws; the API never hangs while Redis is frozen.
    server, keys = private
    engine, client = get_engine(), Client()
    data = redis.Redis.from_url(server.url, decode_responses=True)
    worker = _worker(server, keys, tmp_path, "a")
    try:
        ids = [engine.tasks.enqueue("failure.awork", {"seconds": 0.3}, queue="out").id for _ in range(20)]
        wait_for(lambda: "RUNNING" in statuses(data, keys, ids), message=worker.output())
        server.pause()
        try:
            _assert_unavailable_fast(client, ids[0])
        finally:
            server.resume()
        wait_for(lambda: _ready(client), timeout=5)
        ids.append(engine.tasks.enqueue("failure.awork", queue="out").id)
        wait_for(lambda: set(statuses(data, keys, ids)) == {"SUCCEEDED"}, timeout=30, message=worker.output())
        assert pending(data, keys, ["out"]) == 0 and worker.proc.poll() is None
    finally:
        worker.kill()


@pytest.mark.parametrize(("timing", "freeze_s", "task_s"), [
    # Past the 2 s visibility timeout and the workers' read timeouts (about 7 s): calls fail and
    # their loops restart. (4 of 6 tasks ran twice before the fix.)
    ({}, 8, 12),
])
def test_a_freeze_longer_than_the_visibility_timeout_reruns_nothing_that_live_workers_run(
        private: tuple[RedisServer, Keys], tmp_path: Path, timing: dict[str, float], freeze_s: float,
        task_s: float) -> None:
    # While Redis is frozen no heartbeat lands, so every in-flight entry ages past the visibility
    # timeout; the first reaper back used to take live workers' entries and run those tasks again
    # (a WorkerLost on each). Nothing crashed: every task must run once, as attempt 1.
    server, keys = private
    engine = get_engine()
    data = redis.Redis.from_url(server.url, decode_responses=True)
    workers = [_worker(server, keys, tmp_path, name, **timing) for name in ("a", "b")]
    try:
        wait_for(lambda: registered(data, keys, "a") and registered(data, keys, "b"), timeout=30,
                 message=workers[0].output() + workers[1].output())
        ids = [engine.tasks.enqueue(kind, {"seconds": task_s}, queue="out").id
               for kind in ("failure.awork", "failure.work") * 3]
        wait_for(lambda: started(data, keys, *ids), timeout=20, message=workers[0].output())
        server.pause()
        time.sleep(freeze_s)  # the freeze itself is the scenario
        server.resume()
        wait_for(lambda: set(statuses(data, keys, ids)) == {"SUCCEEDED"}, timeout=40,
                 message=workers[0].output() + workers[1].output())
        assert {t: execs(data, keys, t) for t in ids} == {t: 1 for t in ids}
        for task_id in ids:
            record = task(data, keys, task_id)
            # A compact finished record leaves out an empty error list (includes/retain.lua).
            assert record["attempt"] == "1" and record.get("errors", "[]") == "[]", record
        assert pending(data, keys, ["out"]) == 0
        assert "reclaiming nothing for" in workers[0].output() + workers[1].output()  # and it said why
    finally:
        for worker in workers:
            worker.kill()


def test_redis_killed_and_restarted_with_aof_loses_nothing_fsynced(
        private: tuple[RedisServer, Keys], tmp_path: Path) -> None:
    # It should survive: streams, consumer groups, the schedule, the DLQ and task hashes (AOF with
    # appendfsync always here, so the test needs no fsync timing; everysec may lose ~1 s), and the
    # worker, which reconnects by itself and finishes work that was in flight during the crash.
    server, keys = private
    engine, client = get_engine(), Client()
    data = redis.Redis.from_url(server.url, decode_responses=True)
    data.config_set("appendfsync", "always")
    worker = _worker(server, keys, tmp_path, "a")
    try:
        wait_for(lambda: data.zscore(keys.workers(), "a"), message=worker.output())
        poison = engine.tasks.enqueue("dtq.fail", queue="out").id
        ids = [engine.tasks.enqueue("failure.awork", {"seconds": 1}, queue="out").id for _ in range(30)]
        delayed = [engine.tasks.enqueue("failure.work", queue="out", delay_seconds=3).id for _ in range(3)]
        wait_for(lambda: statuses(data, keys, [poison]) == ["DEAD_LETTERED"] and
                 "RUNNING" in statuses(data, keys, ids), message=worker.output())
        server.kill()
        _assert_unavailable_fast(client, ids[0])
        # Redis stays down until a loop of the worker has met the outage and is supervised through
        # it: a restart before any loop touched Redis would test nothing of the worker's side.
        wait_for(lambda: "restarting in" in worker.output(), timeout=15, message=worker.output())
        server.start()  # same port, same directory: replays the AOF
        wait_for(lambda: _ready(client), timeout=10)
        assert len(dead_letters(data, keys)) == 1 and data.exists(keys.task(poison))
        wait_for(lambda: set(statuses(data, keys, [*ids, *delayed])) == {"SUCCEEDED"}, timeout=40,
                 message=worker.output())
        assert pending(data, keys, ["out"]) == 0 and total(data, keys, keys.schedule) == 0
        assert worker.proc.poll() is None  # the same process, no restart needed
    finally:
        worker.kill()


def test_loops_that_backed_off_through_an_outage_resume_as_soon_as_redis_is_back(
        private: tuple[RedisServer, Keys], tmp_path: Path) -> None:
    # Through a 6.5 s outage the consumer's restarts back off to 3.2 s, then 6.4 s. Once Redis is
    # back, the first heartbeat that lands must wake every loop, not leave the worker idle for
    # the rest of a backoff it grew while Redis was gone.
    server, keys = private
    data = redis.Redis.from_url(server.url, decode_responses=True)
    with _registered_worker(server, keys, tmp_path, data) as worker:
        server.kill()
        time.sleep(6.5)  # the outage is the scenario
        server.start()
        wait_for(lambda: _ready(Client()), timeout=10)
        back = time.monotonic()
        task_id = get_engine().tasks.enqueue("failure.awork", queue="out").id
        wait_for(lambda: statuses(data, keys, [task_id]) == ["SUCCEEDED"], timeout=15, message=worker.output())
        assert time.monotonic() - back < 3, worker.output()
        assert "restarting in 3.2s" in worker.output()  # it had backed off that far


@contextlib.contextmanager
def _registered_worker(server: RedisServer, keys: Keys, tmp_path: Path, data: redis.Redis) -> Iterator[WorkerProcess]:
    worker = _worker(server, keys, tmp_path, "a")
    try:
        wait_for(lambda: data.zscore(keys.workers(), "a"), message=worker.output())
        yield worker
    finally:
        worker.kill()
