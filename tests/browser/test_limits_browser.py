"""Queue limits on /queues/<q>/ in headless Chromium against daphne and a real worker: an admin sets
them through the form (the page then shows the worker held to them), clears them after the
confirm dialog, each audited as the admin from the console; a read-only staff user gets no form
and a forged POST is refused."""

from __future__ import annotations

from typing import Any

from dtq_core.engine import Engine
from tests.conftest import WorkerProcess, wait_for

from .conftest import log_in
from .server import ConsoleServer


def test_an_admin_sets_and_clears_limits_through_the_queue_page(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    console_engine.tasks.enqueue("dtq.echo")  # the queue exists and the worker serves it
    log_in(page, console, "admin", "/queues/default/")
    form = page.locator("#limits-form")
    form.locator("input[name=concurrency]").fill("1")
    form.locator("input[name=rate_limit]").fill("30")
    form.locator("input[name=rate_period_s]").fill("60")
    form.get_by_role("button", name="Save limits").click()
    page.wait_for_selector(".msg-success")
    assert "Set the limits of queue default: concurrency 1, rate 30 per 60 s" in page.inner_text(".messages")
    assert page.locator('tr[data-limit="rate"]').inner_text().split("\t")[1].strip() == "30 per 60 s"
    assert page.locator("#limits-form input[name=concurrency]").input_value() == "1"  # the form shows them
    limits = console_engine.limits.get("default")
    assert limits["concurrency"] == 1 and limits["rate"] == {"limit": 30, "period_s": 60.0}

    # Three 2 s sleeps against a worker of concurrency 4: the page shows it held to one at a time.
    for _ in range(3):
        console_engine.tasks.enqueue("dtq.sleep", {"seconds": 2})

    def one_running() -> bool:
        page.reload()
        return "1 running of 1" in page.locator('tr[data-limit="concurrency"]').inner_text()

    wait_for(one_running, timeout=20, interval=0.3, message="the page never showed the limit in use")
    assert "started in the window" in page.locator('tr[data-limit="rate"]').inner_text()

    page.locator("#limits-form").get_by_role("button", name="Clear limits").click()  # confirm(): accepted
    page.wait_for_selector(".msg-success")
    assert "Cleared the limits of queue default" in page.inner_text(".messages")
    assert "none" in page.locator('tr[data-limit="concurrency"]').inner_text()
    assert console_engine.limits.get("default")["concurrency"] is None

    page.click("nav >> text=Audit")
    rows = [r.inner_text() for r in page.locator("#audit-table tbody tr").all()[:2]]
    assert all("queue.limits" in text and "user:admin" in text and "console" in text and "queue:default" in text
               for text in rows), rows


def test_a_read_only_staff_user_sees_no_form_and_a_forged_post_is_refused(
        page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    console_engine.tasks.enqueue("dtq.echo", queue="readonly-limits")
    before = console_engine.audit.list(limit=500).items
    log_in(page, console, "readonly", "/queues/readonly-limits/")
    assert "Throttled" in page.inner_text("#limits")  # the limits are shown to every reader
    assert page.locator("#limits-form").count() == 0
    assert page.get_by_role("button", name="Save limits").count() == 0
    status = page.evaluate("""async () => {
        const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
        const body = new URLSearchParams({csrfmiddlewaretoken: token, concurrency: '1'});
        const r = await fetch('/queues/readonly-limits/limits',
                              {method: 'POST', body, credentials: 'same-origin', redirect: 'manual'});
        return r.status;
    }""")
    assert status == 403
    assert console_engine.limits.get("readonly-limits")["concurrency"] is None
    assert console_engine.audit.list(limit=500).items == before
