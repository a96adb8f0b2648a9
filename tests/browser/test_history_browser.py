"""History charts in headless Chromium against daphne and a real worker (issue 24, item 2): the
charts are images with a name and a description, their data tables hold the numbers, the range
switch works, and the charts redraw by themselves as tasks finish (no page reload)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from dtq_core.engine import Engine
from tests.conftest import WorkerProcess, wait_for, worker_env
from tests.redis_server import RedisServer

from .conftest import log_in
from .server import ConsoleServer

TITLE = "Tasks finished per minute, by outcome"


@pytest.fixture
def history_worker(redis_server: RedisServer, console_prefix: str, tmp_path: Any) -> Iterator[WorkerProcess]:
    env = worker_env(redis_server.url, console_prefix, DTQ_TASK_MODULES="tests.history.handlers")
    proc = WorkerProcess(["--name", "history-worker", "--queues", "hist-live"], env, tmp_path / "worker.log")
    yield proc
    proc.kill()


def _succeeded(page: Any) -> str:
    return str(page.locator(f"#history details:has(summary:has-text('{TITLE}')) [data-chart-value=Succeeded]")
               .first.text_content())


def test_charts_are_named_images_with_their_numbers_and_redraw_as_tasks_finish(
        page: Any, console: ConsoleServer, console_engine: Engine, history_worker: WorkerProcess) -> None:
    first = [console_engine.tasks.enqueue("hist.sleep", {"ms": 5}, queue="hist-live").id for _ in range(3)]
    wait_for(lambda: all(console_engine.tasks.get(t)["status"] == "SUCCEEDED" for t in first), timeout=20,
             message=history_worker.output)
    # The worker writes its history samples about once a second (dtq_core/worker/samples.py).
    wait_for(lambda: console_engine.history.stats(queue="hist-live")["totals"]["succeeded"] == 3, timeout=10,
             message=history_worker.output)
    log_in(page, console, "admin", "/queues/hist-live/")
    chart = page.get_by_role("img", name=f"{TITLE}")
    assert chart.count() == 1
    assert "Succeeded 3" in (chart.locator("desc").text_content() or "")
    assert _succeeded(page) == "3"
    page.wait_for_function("document.body.dataset.feed === 'live'")
    page.evaluate("window.__notReloaded = true")
    more = [console_engine.tasks.enqueue("hist.sleep", {"ms": 5}, queue="hist-live").id for _ in range(4)]
    wait_for(lambda: all(console_engine.tasks.get(t)["status"] == "SUCCEEDED" for t in more), timeout=20,
             message=history_worker.output)
    wait_for(lambda: _succeeded(page) == "7", timeout=20, interval=0.2,
             message=lambda: f"the chart's table still says {_succeeded(page)}")
    assert page.evaluate("window.__notReloaded") is True  # redrawn in place
    # The range switch: a link per range, the current one marked.
    page.get_by_role("navigation", name="History range").get_by_role("link", name="7d").click()
    page.wait_for_url("**/queues/hist-live/?range=7d#history")
    assert page.get_by_role("img", name="Tasks finished per hour, by outcome").count() == 1
    assert page.locator(".ranges a[aria-current=true]").text_content() == "7d"
    page.screenshot(path=str(console.directory / "history.png"), full_page=True)
