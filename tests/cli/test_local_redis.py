"""Operator commands next to `make run` read make run's Redis (var/redis.url, written by
scripts/run.py), not whatever answers on 6379, and say on stderr which Redis they read when
DTQ_REDIS_URL did not name it. A throwaway redis-server on a free port stands in for make run's."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..conftest import ROOT
from ..redis_server import RedisServer


def run_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("dtq_run", ROOT / "scripts" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def make_runs_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """make run's Redis, with a paused queue holding one task, under the default key prefix."""
    with RedisServer(tmp_path / "make-run-redis", appendonly=False) as server:
        engine = Engine(DtqConfig(redis_url=server.url))
        engine.tasks.enqueue("dtq.echo", queue="made-by-run")
        engine.queues.pause("made-by-run", Actor.cli())
        yield server


def operator_env(state: Path, **extra: str) -> dict[str, str]:
    """An operator's shell beside make run: no DTQ_* variables at all."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DTQ_")}
    env.update(DJANGO_SETTINGS_MODULE="dtq_site.settings", DTQ_LOCAL_STATE_DIR=str(state), **extra)
    return env


def command(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_bin_dtq_and_manage_py_read_make_runs_redis_and_say_so(make_runs_redis: RedisServer, tmp_path: Path) -> None:
    state = tmp_path / "var"
    run_script().write_private(state / "redis.url", make_runs_redis.url)  # as make run does at start
    env = operator_env(state)
    said = f"dtq: reading {make_runs_redis.url} (from {state / 'redis.url'}, written by make run)"
    listed = command([str(ROOT / "bin" / "dtq"), "queue", "list", "--json"], env, cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [queue] = [q for q in json.loads(listed.stdout) if q["name"] == "made-by-run"]
    assert queue["waiting"] == 1 and queue["paused"] is True
    assert said in listed.stderr
    table = command([sys.executable, "manage.py", "queue", "list"], env, cwd=ROOT)
    assert table.returncode == 0 and "made-by-run" in table.stdout and said in table.stderr, table.stderr
    resumed = command([str(ROOT / "bin" / "dtq"), "queue", "resume", "made-by-run"], env, cwd=tmp_path)
    assert resumed.returncode == 0 and resumed.stdout.strip() == "queue made-by-run resumed", resumed.stderr
    assert Engine(DtqConfig(redis_url=make_runs_redis.url)).queues.get("made-by-run")["paused"] is False


def test_dtq_redis_url_still_wins_and_needs_no_banner(make_runs_redis: RedisServer, tmp_path: Path) -> None:
    state = tmp_path / "var"
    run_script().write_private(state / "redis.url", "redis://127.0.0.1:1/0")  # a stale make run
    listed = command([str(ROOT / "bin" / "dtq"), "queue", "list", "--json"],
                     operator_env(state, DTQ_REDIS_URL=make_runs_redis.url), cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "made-by-run" in listed.stdout and "reading" not in listed.stderr


def test_a_broken_redis_url_file_stops_with_one_line_naming_it(tmp_path: Path) -> None:
    state = tmp_path / "var"
    run_script().write_private(state / "redis.url", "http://nope")
    proc = command([str(ROOT / "bin" / "dtq"), "queue", "list"], operator_env(state), cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert str(state / "redis.url") in line and "written by make run" in line and "redis://" in line
