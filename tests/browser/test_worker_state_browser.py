"""The workers table shows an operator's quiet as it takes effect, without a reload (issue 24,
item 7): live.js refreshes each row's state badge from /console/state.json."""

from __future__ import annotations

from typing import Any

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from tests.conftest import wait_for

from .conftest import log_in
from .server import ConsoleServer


def test_a_quieted_worker_reads_quiet_without_a_reload(page: Any, console: ConsoleServer, console_engine: Engine,
                                                       worker: Any) -> None:
    wait_for(lambda: any(w["id"] == "browser-worker" for w in console_engine.workers.list()), timeout=20,
             message=worker.output)
    log_in(page, console, "admin", "/workers/")
    badge = page.locator('tr[data-worker="browser-worker"] [data-f=state] .badge')
    badge.wait_for()
    assert badge.inner_text() == "running"
    page.evaluate("window.__notReloaded = true")
    assert console_engine.workers.quiet("browser-worker", Actor(name="cli:test", source="cli")) is True
    wait_for(lambda: badge.inner_text() == "quiet", timeout=30, interval=0.2,
             message=lambda: f"state still {badge.inner_text()}")
    assert "st-paused" in (badge.get_attribute("class") or "")
    assert page.evaluate("window.__notReloaded") is True
