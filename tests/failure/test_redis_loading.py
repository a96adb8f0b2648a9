"""A Redis restarted on existing data answers LOADING until its dataset is in memory. Workers and
`make run` wait for it (they do not exit), /ready says 503 REDIS_UNAVAILABLE meanwhile, and work
runs once it has loaded.

The loading window is made long and deterministic with real redis-server settings:
key-load-delay (microseconds per key loaded) over a 100,000-key RDB, events served every 1 KB
read; the test ends the window itself with CONFIG SET key-load-delay 0 (CONFIG works while
loading)."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
import yaml
from django.test import Client

from dtq_core.conf import get_engine
from dtq_core.keys import Keys

from ..conftest import ROOT, WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer, free_port
from ..site.test_make_run import _alive, _get
from .support import env, registered, statuses

pytestmark = pytest.mark.slow

LOAD_SLOWLY = ["--key-load-delay", "2000", "--loading-process-events-interval-bytes", "1024"]  # ~200 s for 100k keys
LOADING_LINE = "Redis is loading its dataset into memory; waiting for it"
LOOPS_LOADING_LINE = "Redis is loading its dataset into memory; every loop retries with backoff"


def persist_a_dataset(directory: Path, keys: int = 100_000) -> None:
    """Leave `keys` filler keys in directory's AOF base (an RDB: the key-load-delay applies per key)."""
    with RedisServer(directory, appendonly=True) as server:
        client = redis.Redis(port=server.port)
        pipe = client.pipeline(transaction=False)
        for start in range(0, keys, 1000):
            pipe.mset({f"filler:{i}": "x" * 16 for i in range(start, start + 1000)})
        pipe.execute()
        client.bgrewriteaof()
        wait_for(lambda: not any(int(client.info("persistence")[f]) for f in
                                 ("aof_rewrite_in_progress", "aof_rewrite_scheduled")), timeout=30)


def loading(port: int) -> bool:
    try:
        redis.Redis(port=port, socket_timeout=1).ping()
    except redis.exceptions.BusyLoadingError:
        return True
    except redis.exceptions.ConnectionError:
        return False
    return False


def loading_refusals(port: int) -> int:
    """How many commands this redis-server has refused with LOADING (INFO works while loading)."""
    stats = redis.Redis(port=port, socket_timeout=2).info("errorstats")
    return int(stats.get("errorstat_LOADING", {}).get("count", 0))


def finish_loading(port: int) -> None:
    redis.Redis(port=port, socket_timeout=5).config_set("key-load-delay", 0)


@pytest.fixture
def loading_redis(tmp_path: Path, settings: Any) -> Iterator[tuple[RedisServer, Keys]]:
    """A redis-server of this test's own, started on a dataset it is still loading."""
    prefix = f"dtqtest:{uuid4().hex[:12]}"
    persist_a_dataset(tmp_path / "redis")
    server = RedisServer(tmp_path / "redis", appendonly=True, args=LOAD_SLOWLY).start(wait=False)
    settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": prefix}
    try:
        wait_for(lambda: loading(server.port), timeout=10, message="redis-server never answered LOADING")
        yield server, Keys(prefix)
    finally:
        server.stop()


def test_a_worker_started_while_redis_loads_waits_then_serves(loading_redis: tuple[RedisServer, Keys],
                                                             tmp_path: Path) -> None:
    # It used to exit at once ("cannot reach Redis ... LOADING"): a restart of Redis and the
    # workers together (a host reboot, `docker compose up`) left no worker running.
    server, keys = loading_redis
    worker = WorkerProcess(["--name", "a", "--queues", "out"], worker_env(server.url, keys.prefix, **env()),
                           tmp_path / "worker.log")
    try:
        wait_for(lambda: LOADING_LINE in worker.output() or worker.proc.poll() is not None, timeout=30,
                 message=worker.output)
        assert worker.proc.poll() is None, worker.output()
        started = time.monotonic()
        response = Client().get("/ready")
        assert time.monotonic() - started < 2
        assert response.status_code == 503 and response.json()["error"]["code"] == "REDIS_UNAVAILABLE"
        assert "loading" in response.json()["error"]["message"]
        submit = Client().post("/api/v1/tasks", {"type": "failure.work"}, content_type="application/json")
        assert submit.status_code == 503 and submit.json()["error"]["code"] == "REDIS_UNAVAILABLE"
        assert loading(server.port)  # the window was still open for all of the above

        finish_loading(server.port)
        server.wait_ready(timeout=30)
        data = redis.Redis.from_url(server.url, decode_responses=True)
        wait_for(lambda: registered(data, keys, "a"), timeout=30, message=worker.output)
        assert Client().get("/ready").status_code == 200
        task_id = get_engine().tasks.enqueue("failure.work", queue="out").id
        wait_for(lambda: statuses(data, keys, [task_id]) == ["SUCCEEDED"], timeout=30, message=worker.output)
        assert worker.output().count(LOADING_LINE) == 1  # said once, not once per retry
        assert "Traceback" not in worker.output()
    finally:
        worker.kill()


def test_a_worker_stopped_while_redis_loads_exits_cleanly(loading_redis: tuple[RedisServer, Keys],
                                                          tmp_path: Path) -> None:
    server, keys = loading_redis
    worker = WorkerProcess(["--name", "a", "--queues", "out"], worker_env(server.url, keys.prefix, **env()),
                           tmp_path / "worker.log")
    try:
        wait_for(lambda: LOADING_LINE in worker.output() or worker.proc.poll() is not None, timeout=30,
                 message=worker.output)
        worker.proc.send_signal(signal.SIGTERM)
        assert worker.wait(20) == 0, worker.output()
        assert "Traceback" not in worker.output()
    finally:
        worker.kill()


def test_a_running_worker_rides_out_a_restart_into_a_long_load(tmp_path: Path, settings: Any) -> None:
    # Redis crashes and comes back on its data: first refused connections, then LOADING for as
    # long as the load takes. The worker's supervised loops back off through both and it runs
    # work once Redis has loaded, in the same process.
    prefix = f"dtqtest:{uuid4().hex[:12]}"
    persist_a_dataset(tmp_path / "redis")
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": prefix}
    keys = Keys(prefix)
    data = redis.Redis.from_url(server.url, decode_responses=True)
    worker = WorkerProcess(["--name", "a", "--queues", "out"], worker_env(server.url, prefix, **env()),
                           tmp_path / "worker.log")
    try:
        wait_for(lambda: registered(data, keys, "a"), timeout=30, message=worker.output)
        server.kill()
        server.args = LOAD_SLOWLY
        server.start(wait=False)
        wait_for(lambda: loading(server.port), timeout=10, message="redis-server never answered LOADING")
        wait_for(lambda: LOOPS_LOADING_LINE in worker.output(), timeout=30, message=worker.output)
        # Let the worker's loops fail on LOADING many times over (Redis counts each refusal).
        wait_for(lambda: loading_refusals(server.port) >= 30, timeout=60, message=worker.output)
        assert worker.proc.poll() is None and loading(server.port)
        finish_loading(server.port)
        server.wait_ready(timeout=30)
        task_id = get_engine().tasks.enqueue("failure.work", queue="out").id
        wait_for(lambda: statuses(data, keys, [task_id]) == ["SUCCEEDED"], timeout=30, message=worker.output)
        assert worker.proc.poll() is None
        # Said once for the whole load, not once per loop restart.
        assert worker.output().count(LOOPS_LOADING_LINE) == 1, worker.output()
        assert "BusyLoadingError" not in worker.output(), worker.output()
    finally:
        worker.kill()
        server.stop()


def test_the_compose_redis_healthcheck_fails_while_redis_loads(loading_redis: tuple[RedisServer, Keys]) -> None:
    # compose starts the API and the workers once Redis is "healthy": not while it still loads.
    server, _ = loading_redis
    kind, *check = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]["redis"]["healthcheck"]["test"]
    # As the container runs it, against this test's port.
    command = ["sh", "-c", check[0].replace("redis-cli", f"redis-cli -p {server.port}")] if kind == "CMD-SHELL" \
        else [check[0], "-p", str(server.port), *check[1:]]
    assert subprocess.run(command, capture_output=True, timeout=30).returncode != 0
    assert loading(server.port)  # the check above ran while it loaded
    finish_loading(server.port)
    server.wait_ready(timeout=30)
    assert subprocess.run(command, capture_output=True, timeout=30).returncode == 0


def test_make_run_waits_for_a_loading_redis_before_starting_daphne_and_the_worker(tmp_path: Path) -> None:
    # `make run` restarted on existing data: its redis-server answers LOADING for a while. It used
    # to start the worker at once, which exited, and make run stopped everything.
    persist_a_dataset(tmp_path / "redis")
    # make run's own redis-server, made to load slowly: a wrapper found first on PATH.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "redis-server"
    real = subprocess.run(["sh", "-c", "command -v redis-server"], capture_output=True, text=True).stdout.strip()
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@" {" ".join(LOAD_SLOWLY)}\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    port, redis_port = free_port(), free_port()
    run_env = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "DJANGO_"))}
    run_env.update(PORT=str(port), DTQ_LOCAL_REDIS_PORT=str(redis_port), DTQ_LOCAL_REDIS_DIR=str(tmp_path / "redis"),
                   DTQ_LOCAL_STATE_DIR=str(tmp_path / "state"),
                   DTQ_DRAIN_TIMEOUT_S="5", DTQ_KEY_PREFIX="dtqtest-loading", PYTHONUNBUFFERED="1",
                   PATH=f"{bin_dir}:{os.environ['PATH']}")
    log_path = tmp_path / "run.log"
    log = open(log_path, "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "scripts/run.py"], cwd=ROOT, env=run_env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "redis is loading its dataset" in log_path.read_text() or proc.poll() is not None,
                 timeout=30, message=log_path.read_text)
        assert proc.poll() is None, log_path.read_text()
        assert "daphne pid" not in log_path.read_text() and loading(redis_port)  # nothing else started yet

        finish_loading(redis_port)
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _get(f"{base}/ready")[0] == 200, timeout=60, message=log_path.read_text)
        body = json.dumps({"type": "dtq.echo", "payload": 7}).encode()
        request = urllib.request.Request(f"{base}/api/v1/tasks", data=body,
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            task_id = json.loads(response.read())["id"]
        wait_for(lambda: _get(f"{base}/api/v1/tasks/{task_id}")[1].get("status") == "SUCCEEDED", timeout=30,
                 message=log_path.read_text)
        output = log_path.read_text()
        assert "redis finished loading its dataset" in output and "exited with code" not in output
        pids = [int(p) for p in re.findall(r"pid (\d+)", output)]
        assert len(pids) == 3  # redis-server, daphne, worker
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=10, message="a child outlived make run")
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        for pid in (int(p) for p in re.findall(r"pid (\d+)", log_path.read_text())):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)  # make run's own children, left by a failure above
        log.close()
