"""A real console for browser tests: migrate a throwaway SQLite DB, make users, serve it with the
web server `make run` uses (scripts/run.py: granian)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import ROOT, worker_env
from tests.redis_server import free_port


def _run_script() -> object:
    spec = importlib.util.spec_from_file_location("dtq_run_script", ROOT / "scripts" / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


web_server_argv = _run_script().web_server_argv  # type: ignore[attr-defined]
PASSWORD = "correct horse battery staple"
USERS_SCRIPT = f"""
from django.contrib.auth.models import User
User.objects.create_superuser("admin", "admin@example.com", {PASSWORD!r})
User.objects.create_user("viewer", "viewer@example.com", {PASSWORD!r})
User.objects.create_user("readonly", "readonly@example.com", {PASSWORD!r}, is_staff=True)
"""


class ConsoleServer:
    """`make run`'s web server on dtq_site.asgi, on a free loopback port, against the test Redis and key prefix."""

    def __init__(self, directory: Path, redis_url: str, key_prefix: str, **env: str) -> None:
        self.directory = directory
        self.port = free_port()
        self.env = worker_env(redis_url, key_prefix, DATABASE_URL=f"sqlite:///{directory / 'db.sqlite3'}",
                              DJANGO_SECRET_KEY="browser-tests", **env)
        self.proc: subprocess.Popen[bytes] | None = None
        self._log = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def prepare(self, template: Path | None = None) -> None:
        """Migrate the SQLite file and create admin (superuser), readonly (staff) and viewer (not staff).

        With a template (a database prepared earlier this way) it is copied instead: migrating costs seconds.
        """
        if template is not None:
            shutil.copy(template, self.directory / "db.sqlite3")
            return
        for args in (["migrate", "--noinput", "-v", "0"], ["shell", "-c", USERS_SCRIPT]):
            subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=self.env, check=True,
                           capture_output=True, timeout=60)

    def start(self) -> ConsoleServer:
        self._log = open(self.directory / f"web-{self.port}.log", "ab")  # noqa: SIM115 - closed in stop()
        # Its own session: crash() kills the server's whole process group (granian's worker too).
        self.proc = subprocess.Popen(web_server_argv("127.0.0.1", self.port), cwd=ROOT, env=self.env,
                                     stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the web server did not start: {self.log()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self._kill_group()
        if self._log is not None:
            self._log.close()
            self._log = None

    def crash(self) -> None:
        """SIGKILL the server (its worker process too), like an API process that dies (no graceful
        WebSocket close)."""
        if self.proc is not None and self.proc.poll() is None:
            self._kill_group()
        self.stop()

    def _kill_group(self) -> None:
        assert self.proc is not None
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(5)

    def log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.directory.glob("web-*.log")))
