"""`make run` (scripts/run.py) leaves no redis-server, daphne or worker behind however the
launcher goes away. Its children have sessions of their own (so Ctrl-C reaches run.py alone, which
stops them in order); run.py stops them on SIGHUP (a terminal closed, an SSH session lost) as on
SIGINT and SIGTERM, and on Linux each child gets SIGTERM when run.py dies by SIGKILL or a crash
(PR_SET_PDEATHSIG). Otherwise they would hold their ports and the next `make run` could not start.

Each test runs the launcher from a copy of this tree on free ports with its own state directory,
and kills whatever it left behind.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from ..conftest import ROOT
from ..redis_server import free_port
from .test_make_run import _alive

pytestmark = pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200 and json.loads(response.read()) is not None
    except (OSError, ValueError):
        return False


def _copy_tree(dest: Path) -> Path:
    ignore = shutil.ignore_patterns(".git", ".venv", "var", "tests", "bench", "docs", "__pycache__", "build",
                                    "*.egg-info", ".pytest_cache", ".mypy_cache")
    shutil.copytree(ROOT, dest, ignore=ignore)
    (dest / "var").mkdir()
    return dest


def _launch(tmp_path: Path) -> tuple[subprocess.Popen[bytes], list[int], Path]:
    tree = _copy_tree(tmp_path / "tree")
    port, redis_port = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "DJANGO_"))}
    env.update(PORT=str(port), DTQ_LOCAL_REDIS_PORT=str(redis_port), DTQ_LOCAL_STATE_DIR=str(tmp_path / "state"),
               DTQ_LOCAL_REDIS_DIR=str(tmp_path / "redis"), DTQ_DRAIN_TIMEOUT_S="3",
               DTQ_KEY_PREFIX="dtqattack-firstrun", PYTHONUNBUFFERED="1")
    log_path = tmp_path / "run.log"
    log = open(log_path, "wb")  # noqa: SIM115
    proc = subprocess.Popen([sys.executable, "scripts/run.py"], cwd=tree, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    log.close()
    deadline = time.monotonic() + 60
    while not _ready(f"http://127.0.0.1:{port}/ready"):
        if time.monotonic() > deadline or proc.poll() is not None:
            _cleanup(proc, log_path)
            pytest.fail("make run did not come up:\n" + log_path.read_text())
        time.sleep(0.2)
    pids = [int(p) for p in re.findall(r"pid (\d+)", log_path.read_text())]
    assert len(pids) == 3, log_path.read_text()  # redis-server, daphne, worker
    return proc, pids, log_path


def _cleanup(proc: subprocess.Popen[bytes], log_path: Path) -> None:
    """Stop what this test started: the launcher, then any child it left (worker, daphne, redis)."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    pids = [int(p) for p in re.findall(r"pid (\d+)", log_path.read_text())] if log_path.exists() else []
    for pid in reversed(pids):  # worker, daphne, then redis
        if _alive(pid):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def _survivors(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        left = [pid for pid in pids if _alive(pid)]
        if not left:
            return []
        time.sleep(0.2)
    return [pid for pid in pids if _alive(pid)]


def _describe(pids: list[int]) -> str:
    lines = []
    for pid in pids:
        try:
            lines.append(f"{pid}: " + Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            lines.append(f"{pid}: ?")
    return "; ".join(lines)


def test_sighup_of_make_run_stops_redis_daphne_and_the_worker(tmp_path: Path) -> None:
    """Closing the terminal (SIGHUP to the foreground group: make and run.py) must stop everything,
    as Ctrl-C does. Today run.py dies of SIGHUP's default action and its three children live on."""
    proc, pids, log_path = _launch(tmp_path)
    try:
        proc.send_signal(signal.SIGHUP)
        left = _survivors(pids, timeout=25)
        assert not left, f"SIGHUP of make run left orphans behind: {_describe(left)}"
    finally:
        _cleanup(proc, log_path)


def test_a_killed_make_run_does_not_leave_its_children_running(tmp_path: Path) -> None:
    """After `kill -9` (or the OOM killer) of the launcher, its worker, daphne and redis-server must
    not keep running unowned: they hold ports 8000/6380 and make the next `make run` fail."""
    proc, pids, log_path = _launch(tmp_path)
    try:
        proc.kill()
        proc.wait(5)
        left = _survivors(pids, timeout=25)
        assert not left, f"SIGKILL of make run left orphans behind: {_describe(left)}"
    finally:
        _cleanup(proc, log_path)
