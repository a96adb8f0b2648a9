"""Tasks running now (issue 24, item 7): GET /api/v1/tasks/running and the console's /tasks/running/,
from real worker processes: each running task with its worker, runtime and progress, the
longest-running first; nothing once they end; bad input and a Redis that is down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.test import Client
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..api.support import assert_error
from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST


def test_running_tasks_with_their_worker_runtime_and_progress(
        live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    env = {**FAST, "DTQ_TASK_MODULES": "tests.progress.handlers"}
    first = live_engine.tasks.enqueue("progress.steps", {"steps": 2, "every": 0.05}, queue="run").id
    worker = start_worker("--name", "runner", "--queues", "run,run-b", **env)
    wait_for(lambda: live_engine.tasks.get(first)["status"] == "RUNNING", timeout=20, message=worker.output)
    second = live_engine.tasks.enqueue("progress.steps", {"steps": 2, "every": 0.05}, queue="run-b").id
    api = APIClient()

    def both() -> Any:
        body = api.get("/api/v1/tasks/running").json()
        done = [r for r in body["results"] if (r["progress"] or {}).get("done") == 2]
        return body if body["total"] == 2 and len(done) == 2 else None

    body = wait_for(both, timeout=20, message=worker.output)
    assert [r["id"] for r in body["results"]] == [first, second]  # longest-running first
    row = body["results"][0]
    assert row["worker_id"] == "runner" and row["queue"] == "run" and row["type"] == "progress.steps"
    assert row["attempt"] == 1 and row["runtime_s"] > 0 and row["started_at"].endswith("Z")
    assert row["progress"]["total"] == 2 and body["shown"] == 2
    only = api.get("/api/v1/tasks/running", {"queue": "run-b"}).json()
    assert [r["id"] for r in only["results"]] == [second] and only["total"] == 1
    page = Client().get("/tasks/running/").content.decode()
    assert first[:13] in page and second[:13] in page and "runner" in page and "2 of 2" in page
    live_engine.client.set(f"{live_engine.keys.prefix}:testlog:release", "1")
    wait_for(lambda: api.get("/api/v1/tasks/running").json()["total"] == 0, timeout=20, message=worker.output)
    assert "Nothing is running." in Client().get("/tasks/running/").content.decode()


def test_bad_input_and_redis_down(live_engine: Engine, settings: Any) -> None:
    assert_error(APIClient().get("/api/v1/tasks/running", {"queue": "Bad Queue"}), 400, "VALIDATION_ERROR")
    assert Client().get("/tasks/running/", {"queue": "q" * 65}).status_code == 400
    settings.DTQ = {**settings.DTQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    assert_error(APIClient().get("/api/v1/tasks/running"), 503, "REDIS_UNAVAILABLE")
    assert Client().get("/tasks/running/").status_code == 503
