"""A real console for browser tests: migrate a throwaway SQLite DB, make users, serve with daphne."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import ROOT, worker_env
from tests.redis_server import free_port

PASSWORD = "correct horse battery staple"
USERS_SCRIPT = f"""
from django.contrib.auth.models import User
User.objects.create_superuser("admin", "admin@example.com", {PASSWORD!r})
User.objects.create_user("viewer", "viewer@example.com", {PASSWORD!r})
User.objects.create_user("readonly", "readonly@example.com", {PASSWORD!r}, is_staff=True)
"""


class ConsoleServer:
    """daphne serving dtq_site.asgi on a free loopback port, against the test Redis and key prefix."""

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
        self._log = open(self.directory / f"daphne-{self.port}.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(self.port), "dtq_site.asgi:application"],
            cwd=ROOT, env=self.env, stdout=self._log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=1) as response:
                    if response.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"daphne did not start: {self.log()[-3000:]}")
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._log is not None:
            self._log.close()
            self._log = None

    def crash(self) -> None:
        """SIGKILL daphne, like an API process that dies (no graceful WebSocket close)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)
        self.stop()

    def log(self) -> str:
        return "".join(p.read_text(errors="replace") for p in sorted(self.directory.glob("daphne-*.log")))
