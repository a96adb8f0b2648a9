"""`make run`'s launcher as a real process tree: Redis, daphne and a worker come up, a task
submitted over HTTP runs, destructive calls need the local API key it prints, and Ctrl-C (SIGINT)
leaves no process of ours behind."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import redis

from ..conftest import ROOT, wait_for
from ..redis_server import free_port


def _get(url: str) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, {}
    except OSError:
        return 0, {}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return status.exists() and "State:\tZ" not in status.read_text()


def _started_since(pid: int, since: float) -> bool:
    """Whether pid's process started at or after `since` (CLOCK_BOOTTIME seconds, as /proc's start
    times count): a child of this test's `make run`, not an older process. (A child's environment
    cannot tell: redis-server and setproctitle write their titles over it.)"""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return int(fields[19]) / os.sysconf("SC_CLK_TCK") >= since - 0.05


def _post(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(url, data=b"", headers=headers or {}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_make_run_serves_runs_a_worker_and_stops_cleanly(tmp_path: Path) -> None:
    port, redis_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "DJANGO_"))}
    state = tmp_path / "state"
    env.update(PORT=str(port), DTQ_LOCAL_REDIS_PORT=str(redis_port), DTQ_LOCAL_REDIS_DIR=str(tmp_path / "redis"),
               DTQ_LOCAL_STATE_DIR=str(state),
               DTQ_DRAIN_TIMEOUT_S="5", DTQ_KEY_PREFIX="dtqtest-run", PYTHONUNBUFFERED="1")
    since = time.clock_gettime(time.CLOCK_BOOTTIME)
    stopped = False  # make run stopped its children: the pids in its log are no longer theirs
    log = open(tmp_path / "run.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "scripts/run.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _get(f"{base}/ready")[0] == 200, timeout=40,
                 message=lambda: (tmp_path / "run.log").read_text())
        body = json.dumps({"type": "dtq.echo", "payload": 7}).encode()
        request = urllib.request.Request(f"{base}/api/v1/tasks", data=body,
                                         headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=5) as response:
            task_id = json.loads(response.read())["id"]
        wait_for(lambda: _get(f"{base}/api/v1/tasks/{task_id}")[1].get("status") == "SUCCEEDED", timeout=20)
        output = (tmp_path / "run.log").read_text()
        assert f"http://127.0.0.1:{port}/" in output and "createsuperuser" in output
        # The local API key: made once under var/, printed with a curl line that works as shown.
        key = (state / "api_key").read_text().strip()
        assert re.fullmatch(r"[0-9a-f]{64}", key) and (state / "api_key").stat().st_mode & 0o777 == 0o600
        assert f"curl -X POST -H 'X-API-Key: {key}' http://127.0.0.1:{port}/api/v1/queues/default/pause" in output
        assert _post(f"{base}/api/v1/queues/default/pause")[0] == 401
        status, body = _post(f"{base}/api/v1/queues/default/pause", {"X-API-Key": key})
        assert status == 200 and body["paused"] is True
        assert (state / "redis.url").read_text().strip() == f"redis://127.0.0.1:{redis_port}/0"
        assert (state / "secret_key").stat().st_mode & 0o777 == 0o600
        pids = [int(p) for p in re.findall(r"pid (\d+)", output)]
        assert len(pids) == 3  # redis-server, daphne, worker
        assert all(_started_since(pid, since) for pid in pids)  # what the cleanup below may kill
        assert (tmp_path / "redis" / "appendonlydir").exists()  # persistent: AOF on
        # Streams in small nodes, and records with a payload up to 1 KB as one listpack
        # (docs/deployment.md, "Redis persistence"): fewer Redis instructions and bytes per task.
        local = redis.Redis(host="127.0.0.1", port=redis_port, decode_responses=True)
        assert local.config_get("stream-node-max-entries") == {"stream-node-max-entries": "16"}
        assert local.config_get("hash-max-listpack-value") == {"hash-max-listpack-value": "1024"}
        local.close()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(30) == 0
        wait_for(lambda: not any(_alive(pid) for pid in pids), timeout=10, message="a child outlived make run")
        stopped = True
    finally:
        if proc.poll() is None:  # a failed assertion: stop it as Ctrl-C would, so its children go too
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        log.close()
        for pid in [] if stopped else (int(p) for p in re.findall(r"pid (\d+)", (tmp_path / "run.log").read_text())):
            if _alive(pid) and _started_since(pid, since):  # left behind by a launcher that could not stop them
                os.kill(pid, signal.SIGKILL)


def test_the_local_secrets_are_made_once_and_kept(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("dtq_run", ROOT / "scripts" / "run.py")
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    path = tmp_path / "var" / "api_key"
    first = run.local_secret(path)
    assert re.fullmatch(r"[0-9a-f]{64}", first) and path.stat().st_mode & 0o777 == 0o600
    assert run.local_secret(path) == first  # reused across restarts
    assert run.local_secret(tmp_path / "var" / "secret_key") != first
