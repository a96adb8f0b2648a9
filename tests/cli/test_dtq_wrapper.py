"""The `dtq` console script and bin/dtq: the operator names of failure-modes.md reach the commands."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_worker.cli import translate

from ..api.support import make_dead_letters
from ..conftest import ROOT, worker_env
from ..redis_server import RedisServer


@pytest.mark.parametrize(("given", "expected"), [
    (["dlq", "list", "--json"], ["dlq", "list", "--json"]),
    (["retry-dlq", "--all", "--queue", "q"], ["dlq", "retry", "--all", "--queue", "q"]),
    (["discard-dlq", "1-0"], ["dlq", "discard", "1-0"]),
    (["queue", "resume", "q"], ["queue", "resume", "q"]),
    (["task", "show", "abc"], ["task", "show", "abc"]),
    (["runworker_dtq", "--burst"], ["runworker_dtq", "--burst"]),
])
def test_operator_names_map_to_manage_py_commands(given: list[str], expected: list[str]) -> None:
    assert translate(given) == expected


def dtq(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "bin" / "dtq"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=60)


def test_bin_dtq_runs_the_operator_commands_from_anywhere(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> None:
    make_dead_letters(live_engine, 2, queue="q")
    live_engine.queues.pause("q", Actor.cli())
    env = worker_env(redis_server.url, key_prefix)
    retried = dtq("retry-dlq", "--all", "--queue", "q", env=env, cwd=tmp_path)
    assert retried.returncode == 0 and retried.stdout.strip() == "retried 2 dead letter(s)", retried.stderr
    resumed = dtq("queue", "resume", "q", env=env, cwd=tmp_path)
    assert resumed.returncode == 0 and resumed.stdout.strip() == "queue q resumed", resumed.stderr
    assert live_engine.queues.get("q")["paused"] is False and live_engine.dlq.count() == 0


def test_bin_dtq_works_through_a_symlink_as_docs_cli_md_installs_it(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> None:
    link = tmp_path / "bin" / "dtq"
    link.parent.mkdir()
    link.symlink_to(ROOT / "bin" / "dtq")
    live_engine.tasks.enqueue("dtq.echo", queue="linked")
    proc = subprocess.run([str(link), "queue", "list", "--json"], cwd=tmp_path, capture_output=True, text=True,
                          env=worker_env(redis_server.url, key_prefix), check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [q["name"] for q in json.loads(proc.stdout)] == ["linked"]


def test_python_m_dtq_worker_cli_works_outside_the_project(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> None:
    make_dead_letters(live_engine, 1)
    env = worker_env(redis_server.url, key_prefix, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-m", "dtq_worker.cli", "dlq", "list", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert [i["queue"] for i in json.loads(proc.stdout)] == ["default"]


def test_dtq_without_arguments_prints_its_usage(tmp_path: Path) -> None:
    proc = dtq(env={"PATH": "/usr/bin:/bin"}, cwd=tmp_path)
    assert proc.returncode == 0 and "dtq retry-dlq" in proc.stdout and "dtq queue" in proc.stdout


# -- the `dtq` console script of an installed dtq, in a project of a user's own ---------------------

PROJECT_SETTINGS = 'SECRET_KEY = "a-user-project"\nUSE_TZ = True\nINSTALLED_APPS = ["dtq_core", "dtq_worker"]\n'


@pytest.fixture
def installed(tmp_path: Path) -> dict[str, Path]:
    """dtq's packages alone, as pip installs them (no dtq_site beside them), the console script
    pip writes for them, and a project directory with its settings package."""
    lib = tmp_path / "site-packages"
    for package in ("dtq_core", "dtq_tasks", "dtq_worker", "dtq_api", "dtq_dashboard"):
        shutil.copytree(ROOT / package, lib / package, ignore=shutil.ignore_patterns("__pycache__"))
    script = tmp_path / "bin" / "dtq"
    script.parent.mkdir()
    script.write_text("import sys\nfrom dtq_worker.cli import main\nsys.exit(main())\n")
    project = tmp_path / "project"
    (project / "mysite").mkdir(parents=True)
    (project / "mysite" / "__init__.py").write_text("")
    (project / "mysite" / "settings.py").write_text(PROJECT_SETTINGS)
    return {"lib": lib, "script": script, "project": project}


def installed_dtq(installed: dict[str, Path], *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "DJANGO_", "PYTHON"))}
    environ.update(env, PYTHONPATH=str(installed["lib"]))
    return subprocess.run([sys.executable, str(installed["script"]), *args], cwd=installed["project"], env=environ,
                          capture_output=True, text=True, check=False, timeout=60)


def test_an_installed_dtq_without_settings_says_what_to_set_in_one_line(installed: dict[str, Path]) -> None:
    proc = installed_dtq(installed, "dlq", "list")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        "dtq: no Django settings: set DJANGO_SETTINGS_MODULE to your project's settings module "
        "(e.g. DJANGO_SETTINGS_MODULE=mysite.settings) and run dtq from the project's directory"]


def test_an_installed_dtq_names_a_settings_module_it_cannot_find(installed: dict[str, Path]) -> None:
    proc = installed_dtq(installed, "dlq", "list", DJANGO_SETTINGS_MODULE="shop.settings")
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"dtq: cannot import the settings module 'shop.settings' (DJANGO_SETTINGS_MODULE): no module named 'shop' "
        f"in {installed['project']}; run dtq from the directory that holds your manage.py"]


def test_an_installed_dtq_runs_from_the_project_directory_without_pythonpath(
        installed: dict[str, Path], live_engine: Engine, redis_server: RedisServer, key_prefix: str) -> None:
    # As manage.py does: the project's own modules import from the directory it runs in.
    live_engine.tasks.enqueue("dtq.echo", queue="mine")
    proc = installed_dtq(installed, "queue", "list", "--json", DJANGO_SETTINGS_MODULE="mysite.settings",
                         DTQ_REDIS_URL=redis_server.url, DTQ_KEY_PREFIX=key_prefix)
    assert proc.returncode == 0, proc.stderr
    assert [q["name"] for q in json.loads(proc.stdout)] == ["mine"]
