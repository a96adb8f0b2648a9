"""The published development SECRET_KEY: `check --deploy` reports it (dtq.E002), a web process with
DEBUG off refuses it in one line, and DEBUG or a real key lets it start. Also the default hosts."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest
from django.core.checks import run_checks

from dtq_api.checks import DEVELOPMENT_SECRET_KEY

from ..conftest import ROOT
from ..redis_server import free_port

REAL_KEY = "k" * 20 + "0123456789abcdefghijklmnopqrstuvwxyz"


def clean_env(**extra: str) -> dict[str, str]:
    """The environment of an operator who set nothing (no DJANGO_* or DTQ_* variables)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "DTQ_"))}
    env.update(DJANGO_SETTINGS_MODULE="dtq_site.settings", PYTHONUNBUFFERED="1", **extra)
    return env


@pytest.mark.parametrize(("key", "reported"), [(DEVELOPMENT_SECRET_KEY, True),
                                                ("change-me-in-production-with-a-long-random-value", True),
                                                (REAL_KEY, False)])
def test_check_deploy_reports_the_public_key(settings: Any, key: str, reported: bool) -> None:
    settings.SECRET_KEY = key
    assert ("dtq.E002" in [m.id for m in run_checks(include_deployment_checks=True)]) is reported
    assert "dtq.E002" not in [m.id for m in run_checks()]  # only --deploy: `make run` and tests stay quiet


def test_manage_py_check_deploy_fails_on_the_default_key() -> None:
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "(dtq.E002) DJANGO_SECRET_KEY is not set" in proc.stderr, proc.stderr
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT,
                          env=clean_env(DJANGO_SECRET_KEY=REAL_KEY), capture_output=True, text=True, timeout=120)
    assert "dtq.E002" not in proc.stderr + proc.stdout


def test_daphne_with_debug_off_refuses_the_default_key_in_one_line() -> None:
    port = free_port()
    proc = subprocess.run([sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                           "dtq_site.asgi:application"], cwd=ROOT, env=clean_env(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("dtq: refusing to start") and "DJANGO_SECRET_KEY" in lines[0]
    assert "DJANGO_DEBUG=true" in lines[0] and "secrets.token_hex" in lines[0]


@pytest.mark.parametrize("module", ["dtq_site.asgi", "dtq_site.wsgi"])
@pytest.mark.parametrize(("env", "starts"), [({}, False), ({"DJANGO_DEBUG": "true"}, True),
                                             ({"DJANGO_SECRET_KEY": REAL_KEY}, True)])
def test_the_web_entry_points_refuse_only_a_public_key_with_debug_off(module: str, env: dict[str, str],
                                                                      starts: bool) -> None:
    proc = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, env=clean_env(**env),
                          capture_output=True, text=True, timeout=120)
    assert (proc.returncode == 0) is starts, proc.stderr
    assert ("dtq: refusing to start" in proc.stderr) is not starts


def test_testserver_is_not_an_allowed_host_by_default() -> None:
    code = "from django.conf import settings; print(settings.ALLOWED_HOSTS)"
    proc = subprocess.run([sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=clean_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "['127.0.0.1', 'localhost', '[::1]']"
