"""Browser fixtures: one daphne console per test module, a real worker, and headless Debian Chromium."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from tests.conftest import WorkerProcess, worker_env
from tests.redis_server import RedisServer

from .server import PASSWORD, ConsoleServer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture(scope="module")
def console_prefix(redis_server: RedisServer) -> Iterator[str]:
    prefix = f"dtqtest:{uuid4().hex[:12]}"
    yield prefix
    client = redis.Redis.from_url(redis_server.url)
    for key in client.scan_iter(match=f"{prefix}:*", count=1000):
        client.unlink(key)


@pytest.fixture(scope="session")
def console_db(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database with the test users, copied by every console server."""
    server = ConsoleServer(tmp_path_factory.mktemp("console-db"), redis_server.url, "unused")
    server.prepare()
    return server.directory / "db.sqlite3"


@pytest.fixture(scope="module")
def console(redis_server: RedisServer, console_prefix: str, console_db: Path,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[ConsoleServer]:
    server = ConsoleServer(tmp_path_factory.mktemp("console"), redis_server.url, console_prefix)
    server.prepare(console_db)
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def console_engine(redis_server: RedisServer, console_prefix: str) -> Engine:
    """The engine the test uses to make data the console then shows (same Redis, same prefix).

    Its made-up task types (emails.send, ...) are no worker's: it accepts them as
    DTQ_ACCEPT_UNKNOWN_TYPES=true does, even after the module's worker registered its types.
    """
    return Engine(DtqConfig(redis_url=redis_server.url, key_prefix=console_prefix, accept_unknown_types=True))


@pytest.fixture(scope="module")
def worker(redis_server: RedisServer, console_prefix: str, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[WorkerProcess]:
    proc = WorkerProcess(["--name", "browser-worker", "--concurrency", "4", "--queues", "default"],
                         worker_env(redis_server.url, console_prefix),
                         tmp_path_factory.mktemp("worker") / "worker.log")
    yield proc
    proc.kill()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        instance = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield instance
        instance.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15000)
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())  # confirm() dialogs: the operator says yes
    yield tab
    context.close()


def log_in(page: Any, console: ConsoleServer, username: str, next_path: str = "/") -> None:
    page.goto(f"{console.url}/login/?next={next_path}")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{console.url}{next_path}")

