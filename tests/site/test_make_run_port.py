"""`make run` with its HTTP port already taken (another dev server on 8000): one line naming the
port, a non-zero exit, and nothing started or written (no redis-server, worker or daphne, and
var/redis.url, which bin/dtq reads, left as it was).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from ..redis_server import free_port
from .test_make_run import _alive
from .test_make_run_signals import _copy_tree


def test_a_taken_http_port_is_refused_before_anything_starts(tmp_path: Path) -> None:
    tree = _copy_tree(tmp_path / "tree")
    holder = socket.socket()
    holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DTQ_", "DJANGO_"))}
    env.update(PORT=str(port), DTQ_LOCAL_REDIS_PORT=str(free_port()), DTQ_LOCAL_STATE_DIR=str(state),
               DTQ_LOCAL_REDIS_DIR=str(tmp_path / "redis"), DTQ_DRAIN_TIMEOUT_S="3",
               DTQ_KEY_PREFIX="dtqattack-firstrun-port", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "scripts/run.py"], cwd=tree, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        output = proc.communicate(timeout=90)[0].decode()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(30)
        holder.close()
        out = locals().get("output", "")
        pids = [int(p) for p in re.findall(r"pid (\d+)", out)]
        for pid in reversed(pids):
            if _alive(pid):
                os.kill(pid, signal.SIGTERM)
        time.sleep(1)
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    assert proc.returncode != 0, output
    assert str(port) in output, output
    assert "worker pid" not in output, f"a worker was started although port {port} was taken:\n{output}"
    assert not (state / "redis.url").exists(), "var/redis.url was rewritten by a run that could not serve"
