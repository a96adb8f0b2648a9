"""The whole service on Redis Sentinel (DTQ_REDIS_URL=redis+sentinel://...): the API (daphne) and
real worker processes find the master through the sentinels; then the master is SIGKILLed while
5,000 tasks flow. Every worker and the API carry on by themselves within seconds of the promotion
and nothing stays stuck; with DTQ_REDIS_MIN_REPLICAS=1 no acknowledged task is lost, and with 0
the loss (the window asynchronous replication allows) is counted and printed
(docs/failure-modes.md, "Failover")."""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.errors import DtqError
from dtq_core.keys import Keys
from dtq_core.submit import Submission

from ..browser.server import ConsoleServer
from ..conftest import WorkerProcess, wait_for, worker_env
from ..redis_topologies import SentinelSetup, client

pytestmark = pytest.mark.slow

TASKS = 5000
BATCH = 100
KILL_AFTER = 2000  # acknowledged submits before the master is killed: mid-run
WORKERS = 3
RECOVERY_S = 10.0  # the API and every worker must carry on within this of the promotion
# Short timeouts (as the failure suite's): a completion the failover lost leaves its entry
# pending, reclaimed after the visibility timeout; heartbeats under it.
WORKER_ENV = {"DTQ_VISIBILITY_TIMEOUT_S": 2, "DTQ_HEARTBEAT_INTERVAL_S": 0.5, "DTQ_DRAIN_TIMEOUT_S": 2,
              "DTQ_SCHEDULER_LOCK_TTL_S": 2, "DTQ_STALE_CLAIM_S": 2}
WORKER_CONCURRENCY = 50
SUBMIT_TROUBLE = (redis.RedisError, DtqError, ConnectionError, TimeoutError, OSError)


@pytest.fixture
def prefix() -> str:
    return f"dtqtest:{uuid4().hex[:12]}"


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[Any]]:
    """What a test starts (workers, daphne): stopped after it, by PID."""
    things: list[Any] = []
    yield things
    for thing in things:
        thing.kill() if isinstance(thing, WorkerProcess) else thing.stop()


def start_api(started: list[Any], directory: Path, url: str, prefix: str, **env: Any) -> ConsoleServer:
    directory.mkdir(exist_ok=True)
    server = ConsoleServer(directory, url, prefix, DTQ_ALLOW_ANONYMOUS_ADMIN="true",
                           **{k: str(v) for k, v in env.items()})
    started.append(server)
    return server.start()


def start_workers(started: list[Any], directory: Path, url: str, prefix: str, count: int,
                  **env: Any) -> list[WorkerProcess]:
    workers = [WorkerProcess(["--name", f"w{i}", "--concurrency", str(WORKER_CONCURRENCY)],
                             worker_env(url, prefix, **env), directory / f"worker-{i}.log") for i in range(count)]
    started.extend(workers)
    return workers


def http(server: ConsoleServer, method: str, path: str, body: Any = None, timeout: float = 5) -> tuple[int, Any]:
    request = urllib.request.Request(server.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def statuses(master: redis.Redis, engine: Engine, ids: list[str]) -> list[str | None]:
    pipe = master.pipeline(transaction=False)
    for task_id in ids:
        pipe.hget(engine.keys.task(task_id), "status")
    return pipe.execute()


def test_the_api_and_a_worker_run_tasks_on_sentinel(fresh_sentinel: SentinelSetup, prefix: str, tmp_path: Path,
                                                    started: list[Any]) -> None:
    (worker,) = start_workers(started, tmp_path, fresh_sentinel.url, prefix, 1)
    api = start_api(started, tmp_path / "api", fresh_sentinel.url, prefix)
    assert http(api, "GET", "/ready")[0] == 200
    status, task = http(api, "POST", "/api/v1/tasks", {"type": "dtq.echo", "payload": {"n": 1}})
    assert status == 201, task
    status, batch = http(api, "POST", "/api/v1/tasks/batch",
                         {"tasks": [{"type": "dtq.echo", "payload": {"n": n}} for n in range(20)]})
    assert status == 200, batch
    ids = [task["id"], *(item["id"] for item in batch["results"])]
    wait_for(lambda: all(http(api, "GET", f"/api/v1/tasks/{i}")[1]["status"] == "SUCCEEDED" for i in ids),
             timeout=30, message=worker.output)
    assert http(api, "GET", f"/api/v1/tasks/{task['id']}")[1]["result"] == {"n": 1}
    # An operator action on the master too (audited there).
    status, paused = http(api, "POST", "/api/v1/queues/default/pause")
    assert status == 200, paused
    master = client(fresh_sentinel.master_port())
    assert master.hexists(Keys(prefix).paused_index(), "default")  # written on the master


@pytest.mark.parametrize("min_replicas", [0, 1])
def test_a_sentinel_failover_mid_run(fresh_sentinel: SentinelSetup, prefix: str, tmp_path: Path,
                                     started: list[Any], min_replicas: int) -> None:
    url = fresh_sentinel.url
    env = {**WORKER_ENV, "DTQ_REDIS_MIN_REPLICAS": min_replicas}
    workers = start_workers(started, tmp_path, url, prefix, WORKERS, **env)
    api = start_api(started, tmp_path / "api", url, prefix, **env)
    engine = Engine(DtqConfig(redis_url=url, key_prefix=prefix, redis_min_replicas=min_replicas,
                              accept_unknown_types=True))
    submissions: list[Submission] = [engine.tasks.validate("dtq.echo", {"n": n}, queue="failover",
                                                           idempotency_key=f"failover-{n}") for n in range(TASKS)]
    wait_for(lambda: len(engine.workers.list()) == WORKERS, timeout=30, message=workers[0].output)
    acknowledged: list[str] = []
    kill_now, killed = threading.Event(), threading.Event()
    times: dict[str, float] = {}  # seconds after the SIGKILL

    def kill() -> None:
        kill_now.wait(60)
        times["kill"], times["kill_wall"] = time.monotonic(), time.time()
        killed.set()
        fresh_sentinel.kill_master(replicas=1)
        times["promoted"] = time.monotonic() - times["kill"]

    def until(name: str, recovered: Any) -> None:
        """Poll from the SIGKILL until recovered() holds; note when (missing: it never did)."""
        killed.wait(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if recovered():
                    times[name] = time.monotonic() - times["kill"]
                    return
            except (redis.RedisError, RuntimeError, OSError):
                pass
            time.sleep(0.1)

    def api_submits() -> bool:
        return http(api, "POST", "/api/v1/tasks", {"type": "dtq.echo", "queue": "failover"}, timeout=2)[0] == 201

    def workers_beat() -> bool:  # every worker heartbeating on the master the sentinels name now
        master = client(fresh_sentinel.master_port())
        since = times["kill_wall"] * 1000
        return all((master.zscore(engine.keys.workers(), f"w{i}") or 0) > since for i in range(WORKERS))

    watchers = [threading.Thread(target=kill, daemon=True),
                threading.Thread(target=until, args=("api", api_submits), daemon=True),
                threading.Thread(target=until, args=("workers", workers_beat), daemon=True)]
    for watcher in watchers:
        watcher.start()
    # 1. Submit in paced batches, each retried (same idempotency keys) until it is acknowledged.
    for first in range(0, TASKS, BATCH):
        batch = submissions[first:first + BATCH]
        deadline = time.monotonic() + 30
        while True:
            try:
                acknowledged += [e.id for e in engine.tasks.enqueue_many(batch)]  # type: ignore[union-attr]
                break
            except SUBMIT_TROUBLE as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"submits did not recover: {exc!r}") from exc
                time.sleep(0.05)
        if len(acknowledged) >= KILL_AFTER:
            kill_now.set()
        time.sleep(0.05)
    for watcher in watchers:
        watcher.join(40)
    # 2. A replica was promoted, and the API (a submit through it succeeds) and every worker (alive,
    # heartbeating on the new master) carried on by themselves, within seconds.
    assert "promoted" in times, "no promotion"
    for worker in workers:
        assert worker.proc.poll() is None, worker.output()
    for name in ("api", "workers"):
        assert times.get(name, 1e9) - times["promoted"] < RECOVERY_S, f"{name}: {times}"
    new_master = client(fresh_sentinel.master_port())
    # 3. Every acknowledged task ends: SUCCEEDED, or lost (its record gone); nothing stays stuck.
    assert len(set(acknowledged)) == TASKS

    def settled() -> bool:
        return all(s in ("SUCCEEDED", None) for s in statuses(new_master, engine, acknowledged))

    def stuck() -> str:
        left = [s for s in statuses(new_master, engine, acknowledged) if s not in ("SUCCEEDED", None)]
        return f"{len(left)} tasks stuck: {sorted(set(left))}"

    wait_for(settled, timeout=45, interval=0.25, message=stuck)
    final = statuses(new_master, engine, acknowledged)
    lost = sum(1 for s in final if s is None)
    pipe = new_master.pipeline(transaction=False)
    for task_id in acknowledged:
        pipe.hget(engine.keys.task(task_id), "attempt")
    rerun = sum(1 for attempt in pipe.execute() if attempt and int(attempt) > 1)
    print(f"\nfailover DTQ_REDIS_MIN_REPLICAS={min_replicas}: {TASKS} tasks acknowledged, {lost} lost, {rerun} run "
          f"again; after the SIGKILL: promotion {times['promoted']:.1f}s, API submits {times['api']:.1f}s, every "
          f"worker heartbeating {times['workers']:.1f}s")
    # Submits and completions on the new master waited for its replica exactly when asked to.
    waits = int(new_master.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
    assert (waits > 0) == bool(min_replicas), waits
    if min_replicas:
        assert lost == 0, f"{lost} acknowledged tasks lost although replicas confirmed them"
