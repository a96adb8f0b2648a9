"""dtq in a project of a user's own (tests/user_project: no settings.DTQ, the documented apps)."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import redis

from ..conftest import ROOT

SETTINGS = "tests.user_project.settings"


def run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "DJANGO_"))}
    environ.update(env, DJANGO_SETTINGS_MODULE=SETTINGS)
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=environ, capture_output=True, text=True, timeout=60)


def test_the_dtq_environment_applies_without_settings_dtq() -> None:
    # It should read DTQ_* the way dtq_site does, not fall back to the defaults (Redis on 6379).
    proc = run(["-c", "import django; django.setup(); from dtq_core.conf import get_config; c = get_config(); "
                      "print(c.redis_url, c.task_modules, c.max_attempts)"],
               DTQ_REDIS_URL="redis://127.0.0.1:7191/0", DTQ_TASK_MODULES="a.tasks, b", DTQ_MAX_ATTEMPTS="7")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[0] == "redis://127.0.0.1:7191/0 ('a.tasks', 'b') 7"


def test_an_invalid_variable_stops_a_command_with_one_line() -> None:
    proc = run(["-m", "django", "check"], DTQ_MAX_ATTEMPTS="abc")
    assert proc.returncode == 2
    assert [line for line in proc.stderr.splitlines() if line.strip()] == [
        "dtq: invalid configuration: DTQ_MAX_ATTEMPTS must be an integer (got 'abc')"]


def test_it_enqueues_and_a_burst_worker_runs_the_task(redis_server: Any, key_prefix: str) -> None:
    env = {"DTQ_REDIS_URL": redis_server.url, "DTQ_KEY_PREFIX": key_prefix,
           "DTQ_TASK_MODULES": "tests.user_project.tasks"}
    enqueue = run(["-c", "import django; django.setup(); from dtq_core.conf import get_config; "
                         f"assert get_config().redis_url == {redis_server.url!r}, get_config().redis_url; "
                         "import dtq_tasks; print(dtq_tasks.enqueue('userproject.add', {'a': 2, 'b': 3}))"], **env)
    assert enqueue.returncode == 0, enqueue.stderr
    task_id = enqueue.stdout.strip()
    worker = run(["-m", "django", "runworker_dtq", "--burst"], **env)
    assert worker.returncode == 0, worker.stdout + worker.stderr
    client = redis.Redis.from_url(redis_server.url, decode_responses=True)
    assert client.hget(f"{key_prefix}:task:{task_id}", "status") == "SUCCEEDED"
    assert client.get(f"{key_prefix}:result:{task_id}") == "5"
