"""`manage.py runworker_dtq` as a real process: burst drain, registry, names, bad arguments."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import ROOT, WorkerProcess, wait_for, worker_env


def test_burst_drains_every_queue_and_exits_zero(engine: Engine, start_worker: Callable[..., WorkerProcess],
                                                 redis_client: redis.Redis) -> None:
    ids = [engine.tasks.enqueue("test.pid", queue=q).id for q in ("a", "b", "c") for _ in range(5)]
    worker = start_worker("--burst", "--concurrency", "4", DTQ_TASK_MODULES="tests.worker.handlers")
    assert worker.wait(60) == 0, worker.output()
    tasks = [engine.tasks.get(i) for i in ids]
    assert {t["status"] for t in tasks} == {"SUCCEEDED"}
    assert {t["result"]["pid"] for t in tasks} == {worker.pid}
    assert redis_client.zcard(engine.keys.workers()) == 0  # deregistered


def test_a_live_worker_is_registered_with_heartbeats(engine: Engine, start_worker: Callable[..., WorkerProcess],
                                                     redis_client: redis.Redis) -> None:
    worker = start_worker("--name", "alpha", "--queues", "q1,q2", DTQ_HEARTBEAT_INTERVAL_S="0.2",
                          DTQ_VISIBILITY_TIMEOUT_S="2")
    first = wait_for(lambda: redis_client.zscore(engine.keys.workers(), "alpha"), message=worker.output())
    wait_for(lambda: (redis_client.zscore(engine.keys.workers(), "alpha") or 0) > first, timeout=5)
    (row,) = engine.workers.list()
    assert row["id"] == "alpha" and row["queues"] == ["q1", "q2"] and row["alive"] and row["pid"] == worker.pid
    assert sorted(engine.queues.names()) == ["q1", "q2"]  # --queues registers the queues


def test_a_second_worker_with_a_live_name_is_refused(engine: Engine,
                                                     start_worker: Callable[..., WorkerProcess],
                                                     redis_client: redis.Redis) -> None:
    first = start_worker("--name", "same")
    wait_for(lambda: redis_client.zscore(engine.keys.workers(), "same"), message=first.output())
    second = start_worker("--name", "same")
    assert second.wait(30) != 0
    out = second.output()
    assert "worker name 'same' is in use by a live worker" in out and "Traceback" not in out


@pytest.mark.parametrize(
    ("args", "needle", "why"),
    [(["--queues", "Bad Name"], "--queues", "not a queue name: 'Bad Name'"),
     (["--queues", "mail,dlq"], "--queues", "not a queue name: 'dlq'"),
     (["--queues", ","], "--queues", "expected comma-separated queue names"),
     (["--concurrency", "0"], "--concurrency", "expected a whole number from 1 to 10000 (got '0')"),
     (["--concurrency", "many"], "--concurrency", "expected a whole number from 1 to 10000 (got 'many')"),
     (["--max-tasks", "-3"], "--max-tasks", "expected a whole number from 1 to 10000 (got '-3')"),
     (["--name", ""], "--name", "expected 1-200 characters without spaces")],
)
def test_bad_arguments_exit_non_zero_with_one_clear_line(args: list[str], needle: str, why: str) -> None:
    proc = subprocess.run([sys.executable, "manage.py", "runworker_dtq", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=worker_env("redis://127.0.0.1:1/0", "dtqtest:x"))
    assert proc.returncode != 0 and needle in proc.stderr and "Traceback" not in proc.stderr
    assert why in proc.stderr


def test_an_unimportable_task_module_is_one_line(redis_server: object) -> None:
    env = worker_env(redis_server.url, "dtqtest:mod", DTQ_TASK_MODULES="no_such_module_here")  # type: ignore[attr-defined]
    proc = subprocess.run([sys.executable, "manage.py", "runworker_dtq", "--burst"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode != 0
    assert "DTQ_TASK_MODULES: cannot import no_such_module_here" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("import dtq_tasks\n\ndef broken(:\n    pass\n", "SyntaxError: invalid syntax ({path}:3)"),
        ("import os\nraise RuntimeError('DATABASE_URL is not set')\n",
         "RuntimeError: DATABASE_URL is not set ({path}:2)"),
        ("import dtq_tasks\n\n@dtq_tasks.task('dtq.echo')\ndef echo(payload):\n    return payload\n",
         "ValueError: task type 'dtq.echo' is already registered to dtq_tasks.builtins.echo ({path}:3)"),
        ("import no_such_dependency_here\n", "No module named 'no_such_dependency_here'"),
    ],
    ids=["syntax-error", "error-at-import", "duplicate-task-type", "missing-dependency"],
)
def test_a_task_module_that_fails_to_import_is_one_line_naming_it(redis_server: Any, tmp_path: Any, source: str,
                                                                    error: str) -> None:
    # It should name the listed module and what went wrong in it, never print a traceback.
    (tmp_path / "dtqtest_handlers.py").write_text(source)
    env = worker_env(redis_server.url, "dtqtest:mod", DTQ_TASK_MODULES="dtqtest_handlers", PYTHONPATH=str(tmp_path))
    proc = subprocess.run([sys.executable, "manage.py", "runworker_dtq", "--burst"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode != 0
    error = error.format(path=tmp_path / "dtqtest_handlers.py")
    assert proc.stderr.splitlines()[-1] == f"CommandError: DTQ_TASK_MODULES: cannot import dtqtest_handlers: {error}"
    assert "Traceback" not in proc.stderr


def test_redis_unreachable_at_start_is_one_line() -> None:
    env = worker_env("redis://127.0.0.1:1/0", "dtqtest:down")
    proc = subprocess.run([sys.executable, "manage.py", "runworker_dtq", "--burst"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode != 0
    assert "cannot reach Redis at redis://127.0.0.1:1/0" in proc.stderr and "Traceback" not in proc.stderr


# manage.py, then report which of the web stack's modules the process imported on the way.
RUN_AND_REPORT_IMPORTS = """
import runpy, sys
sys.argv = ["manage.py", "runworker_dtq", *sys.argv[1:]]
try:
    runpy.run_path("manage.py", run_name="__main__")
finally:
    web = ("dtq_site.urls", "dtq_dashboard.views", "dtq_api.views", "rest_framework.views")
    print("imported:", ",".join(m for m in web if m in sys.modules), file=sys.stderr)
"""


def test_start_up_runs_the_system_checks_but_not_the_web_only_ones(redis_server: object) -> None:
    # A worker serves no pages: checking URLs, templates and the admin would import the whole web
    # stack (about 0.4 s and 20 MB per worker). The other checks, dtq's among them, still run.
    env = worker_env(redis_server.url, "dtqtest:checks", DTQ_API_KEY="",  # type: ignore[attr-defined]
                     DTQ_ALLOW_ANONYMOUS_ADMIN="true")
    proc = subprocess.run([sys.executable, "-c", RUN_AND_REPORT_IMPORTS, "--burst"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "(dtq.W001) DTQ_ALLOW_ANONYMOUS_ADMIN is on" in proc.stderr  # dtq's checks ran
    assert "imported: \n" in proc.stderr, proc.stderr[-2000:]

    skipped = subprocess.run([sys.executable, "-c", RUN_AND_REPORT_IMPORTS, "--burst", "--skip-checks"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60, env=env)
    assert skipped.returncode == 0 and "dtq.W001" not in skipped.stderr, skipped.stderr


def test_a_broken_tasks_setting_stops_the_start(redis_server: object, tmp_path: Any) -> None:
    # An untagged check (the Tasks backport's check of settings.TASKS) still runs in the worker.
    (tmp_path / "broken_tasks_settings.py").write_text(
        "from dtq_site.settings import *  # noqa: F403\n"
        "TASKS = {'default': {'BACKEND': 'dtq_core.django_tasks.DtqBackend', 'QUEUES': ['Bad Queue']}}\n")
    env = worker_env(redis_server.url, "dtqtest:tasks", DJANGO_SETTINGS_MODULE="broken_tasks_settings",  # type: ignore[attr-defined]
                     PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    proc = subprocess.run([sys.executable, "manage.py", "runworker_dtq", "--burst"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=env)
    assert proc.returncode != 0 and "dtq.E702" in proc.stderr, proc.stderr[-2000:]
    assert "worker_id=" not in proc.stderr  # it never started
