"""Worker details and controls (issue 24, item 7), with real worker processes: a worker reports its
memory, CPU and running tasks; told to quiet it takes nothing more (a peer runs the new work)
while it finishes what it runs and stays up; told to stop it drains and exits. From the API, the
console and the CLI, audited; unknown ids, bad input and a Redis that is down."""

from __future__ import annotations

import getpass
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..api.support import assert_error
from ..conftest import ROOT, WorkerProcess, wait_for, worker_env
from ..failure.support import FAST
from ..redis_server import RedisServer

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.history.handlers"}


def _worker(api: APIClient, worker_id: str) -> dict[str, Any]:
    response = api.get(f"/api/v1/workers/{worker_id}")
    assert response.status_code == 200, response.content
    return response.json()


def test_a_quiet_worker_finishes_what_it_runs_takes_nothing_more_and_stays_up(
        live_engine: Engine, anonymous_admin: Any, start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    quiet = start_worker("--name", "quiet-me", "--queues", "ctl", **ENV)
    long = engine.tasks.enqueue("hist.sleep", {"ms": 2500}, queue="ctl").id
    wait_for(lambda: engine.tasks.get(long)["status"] == "RUNNING", timeout=20, message=quiet.output)
    shown = _worker(api, "quiet-me")
    assert [t["id"] for t in shown["running"]] == [long]
    assert shown["rss_bytes"] > 10_000_000 and shown["cpu_seconds"] > 0 and shown["cpu_percent"] is not None

    response = api.post("/api/v1/workers/quiet-me/quiet")
    assert response.status_code == 202 and response.json() == {"worker_id": "quiet-me", "control": "quiet",
                                                               "changed": True}
    assert api.post("/api/v1/workers/quiet-me/quiet").json()["changed"] is False  # told already
    wait_for(lambda: _worker(api, "quiet-me")["state"] == "quiet", timeout=10, message=quiet.output)
    later = engine.tasks.enqueue("hist.sleep", {"ms": 10}, queue="ctl").id
    wait_for(lambda: engine.tasks.get(long)["status"] == "SUCCEEDED", timeout=20, message=quiet.output)
    peer = start_worker("--name", "peer", "--queues", "ctl", **ENV)
    wait_for(lambda: engine.tasks.get(later)["status"] == "SUCCEEDED", timeout=20, message=peer.output)
    assert engine.tasks.get(later)["worker_id"] == "peer"  # the quiet worker never took it
    assert quiet.proc.poll() is None and _worker(api, "quiet-me")["alive"] is True
    actions = [(e["action"], e["target"]) for e in engine.audit.list().items]
    assert ("worker.quiet", "worker:quiet-me") in actions


def test_a_stopped_worker_drains_and_exits_and_a_new_run_under_its_name_is_not_stopped(
        live_engine: Engine, anonymous_admin: Any, start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    first = start_worker("--name", "stop-me", "--queues", "ctl2", **ENV)
    task_id = engine.tasks.enqueue("hist.sleep", {"ms": 1500}, queue="ctl2").id
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "RUNNING", timeout=20, message=first.output)
    assert api.post("/api/v1/workers/stop-me/stop").status_code == 202
    assert first.wait(timeout=30) == 0
    assert engine.tasks.get(task_id)["status"] == "SUCCEEDED"  # drained: it finished first
    assert "told to stop by an operator" in first.output()
    second = start_worker("--name", "stop-me", "--queues", "ctl2", **ENV)
    again = engine.tasks.enqueue("hist.sleep", {"ms": 10}, queue="ctl2").id
    wait_for(lambda: engine.tasks.get(again)["status"] == "SUCCEEDED", timeout=20, message=second.output)
    assert second.proc.poll() is None


def test_unknown_workers_and_bad_ids(live_engine: Engine, anonymous_admin: Any) -> None:
    api = APIClient()
    assert_error(api.get("/api/v1/workers/nobody"), 404, "WORKER_NOT_FOUND")
    assert_error(api.post("/api/v1/workers/nobody/quiet"), 404, "WORKER_NOT_FOUND")
    assert_error(api.post("/api/v1/workers/nobody/stop"), 404, "WORKER_NOT_FOUND")
    assert_error(api.get("/api/v1/workers/" + "w" * 300), 400, "VALIDATION_ERROR")
    assert_error(api.post("/api/v1/workers/a%20b/quiet"), 400, "VALIDATION_ERROR")
    assert_error(api.get("/api/v1/workers/nobody/quiet"), 405, "METHOD_NOT_ALLOWED")
    assert live_engine.audit.list().items == []  # nothing was told, nothing audited


def test_controls_need_the_permission(live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "guarded", "--queues", "ctl3", **ENV)
    wait_for(lambda: APIClient().get("/api/v1/workers/guarded").status_code == 200, timeout=20,
             message=worker.output)
    response = APIClient().post("/api/v1/workers/guarded/stop")
    assert response.status_code in (401, 403) and worker.proc.poll() is None


def test_worker_endpoints_answer_503_when_redis_is_down(anonymous_admin: Any) -> None:
    api = APIClient()
    for response in (api.get("/api/v1/workers/w1"), api.post("/api/v1/workers/w1/quiet"),
                     api.post("/api/v1/workers/w1/stop")):
        assert_error(response, 503, "REDIS_UNAVAILABLE")


def test_the_cli_lists_shows_quiets_and_stops(live_engine: Engine, start_worker: Callable[..., WorkerProcess]
                                              ) -> None:
    worker = start_worker("--name", "cli-w", "--queues", "ctl5", **ENV)
    wait_for(lambda: APIClient().get("/api/v1/workers/cli-w").status_code == 200, timeout=20, message=worker.output)

    def run(*args: str) -> str:
        out = StringIO()
        call_command("worker", *args, stdout=out, stderr=StringIO())
        return out.getvalue()

    assert "cli-w" in run("list") and "rss:" in run("show", "cli-w")
    assert "told to quiet" in run("quiet", "cli-w")
    assert "told to stop" in run("stop", "cli-w")
    assert worker.wait(timeout=30) == 0
    assert {e["actor"] for e in live_engine.audit.list().items} == {f"cli:{getpass.getuser()}"}
    with pytest.raises(CommandError, match="not found"):
        run("stop", "nobody")


def test_the_cli_says_when_redis_is_down_or_the_input_is_bad(redis_server: RedisServer, key_prefix: str) -> None:
    def manage(*args: str, url: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "manage.py", "worker", *args], cwd=ROOT, capture_output=True,
                              text=True, env=worker_env(url, key_prefix), timeout=60, check=False)

    down = manage("quiet", "w1", url="redis://127.0.0.1:1/0")
    assert down.returncode != 0 and "cannot reach Redis" in down.stderr
    bad = manage("stop", "x" * 300, url=redis_server.url)
    assert bad.returncode != 0 and len(bad.stderr.strip().splitlines()) == 1
    missing = manage("explode", url=redis_server.url)
    assert missing.returncode != 0 and missing.stdout == ""
