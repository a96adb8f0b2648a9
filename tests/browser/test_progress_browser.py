"""A running task's progress bar on /tasks/<id>/ in headless Chromium against daphne and a real
worker: it moves as the handler reports (from the live feed's task.progress events), without a
reload, and its label reads what the handler said."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from dtq_core.engine import Engine
from tests.conftest import WorkerProcess, wait_for, worker_env
from tests.redis_server import RedisServer

from .conftest import log_in
from .server import ConsoleServer


@pytest.fixture
def progress_worker(redis_server: RedisServer, console_prefix: str, tmp_path: Any) -> Iterator[WorkerProcess]:
    env = worker_env(redis_server.url, console_prefix, DTQ_TASK_MODULES="tests.progress.handlers",
                     DTQ_PROGRESS_MIN_INTERVAL_S=0.2)
    proc = WorkerProcess(["--name", "progress-worker", "--queues", "prog"], env, tmp_path / "worker.log")
    yield proc
    proc.kill()


def test_the_progress_bar_moves_live_as_the_handler_reports(
        page: Any, console: ConsoleServer, console_engine: Engine, progress_worker: WorkerProcess,
        redis_server: RedisServer, console_prefix: str) -> None:
    task_id = console_engine.tasks.enqueue("progress.steps", {"steps": 8, "every": 0.6}, queue="prog").id
    wait_for(lambda: console_engine.tasks.get(task_id)["status"] == "RUNNING", timeout=20,
             message=progress_worker.output)
    log_in(page, console, "admin", f"/tasks/{task_id}/")
    page.wait_for_function("document.body.dataset.feed === 'live'")
    page.evaluate("window.__notReloaded = true")
    bar = page.get_by_role("progressbar", name="Progress")
    first = float(bar.get_attribute("value") or 0)
    wait_for(lambda: float(bar.get_attribute("value") or 0) >= max(first, 1) + 2, timeout=15, interval=0.1,
             message=lambda: f"the bar stayed at {bar.get_attribute('value')}")
    assert page.evaluate("window.__notReloaded") is True  # moved in place, not by reloading the page
    assert bar.get_attribute("max") == "8"
    text = page.locator("[data-progress-text]").inner_text()
    assert " of 8 · step " in text, text
    redis.Redis.from_url(redis_server.url).set(f"{console_prefix}:testlog:release", "1")
    wait_for(lambda: console_engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=20)
