"""/periodic/ in headless Chromium against daphne and a real worker: an admin pauses, resumes,
triggers (the worker runs the task, its badge shows in the history) and deletes a schedule through
the page, each audited as the admin from the console; a read-only staff user gets no buttons and a
forged POST is refused."""

from __future__ import annotations

from typing import Any

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec
from tests.conftest import WorkerProcess, wait_for

from .conftest import log_in
from .server import ConsoleServer


def _schedule(engine: Engine, name: str) -> None:
    # An hour apart: no tick of its own fires while the test runs, only what the page does.
    engine.periodic.create(PeriodicSpec(name=name, type="dtq.echo", payload={"from": name}, every_seconds=3600),
                           actor=Actor.cli())


def test_an_admin_pauses_resumes_triggers_and_deletes_a_schedule_through_the_page(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    _schedule(console_engine, "browser.hourly")
    log_in(page, console, "admin")
    page.click("nav >> text=Periodic")
    page.wait_for_url(f"{console.url}/periodic/")
    row = page.locator('tr[data-periodic="browser.hourly"]')
    assert "Every 3600 seconds" in row.inner_text()

    row.get_by_role("button", name="Pause").click()
    page.wait_for_selector(".msg-success")
    assert "Paused periodic task browser.hourly" in page.inner_text(".messages")
    row = page.locator('tr[data-periodic="browser.hourly"]')
    assert "PAUSED" in row.locator('[data-f="state"]').inner_text()
    assert console_engine.periodic.get("browser.hourly")["paused"] is True

    row.get_by_role("button", name="Resume").click()
    page.wait_for_selector(".msg-success")
    assert "Resumed periodic task browser.hourly" in page.inner_text(".messages")
    assert console_engine.periodic.get("browser.hourly")["paused"] is False

    page.locator('tr[data-periodic="browser.hourly"]').get_by_role("button", name="Trigger now").click()
    page.wait_for_selector(".msg-success")
    message = page.inner_text(".messages")
    assert "Triggered periodic task browser.hourly" in message
    task_id = message.split("task ")[2].split(" ")[0]
    wait_for(lambda: console_engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=20,
             message="the worker did not run the triggered task")

    page.click("a:has-text('browser.hourly')")
    page.wait_for_url(f"{console.url}/periodic/browser.hourly/")
    run = page.locator(f'#periodic-runs tr[data-task="{task_id}"]')
    assert run.locator(".badge[data-status=SUCCEEDED]").count() == 1
    run.locator("a").click()
    page.wait_for_url(f"{console.url}/tasks/{task_id}/")
    assert "browser.hourly" in page.inner_text("dl.kv")
    page.go_back()

    page.get_by_role("button", name="Delete…").click()
    page.wait_for_url(f"{console.url}/periodic/browser.hourly/delete/confirm*")  # a GET form: "?" appended
    page.get_by_role("button", name="Delete browser.hourly").click()
    page.wait_for_url(f"{console.url}/periodic/")
    assert "Deleted periodic task browser.hourly" in page.inner_text(".messages")
    assert page.locator('tr[data-periodic="browser.hourly"]').count() == 0
    assert all(p["name"] != "browser.hourly" for p in console_engine.periodic.list())

    page.click("nav >> text=Audit")
    rows = [r.inner_text() for r in page.locator("#audit-table tbody tr").all()[:4]]
    actions = [next(a for a in ("periodic.delete", "periodic.trigger", "periodic.resume", "periodic.pause")
                    if a in text) for text in rows]
    assert actions == ["periodic.delete", "periodic.trigger", "periodic.resume", "periodic.pause"], rows
    assert all("user:admin" in text and "console" in text and "browser.hourly" in text for text in rows)


def test_a_read_only_staff_user_sees_no_buttons_and_a_forged_post_is_refused(
        page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    _schedule(console_engine, "browser.readonly")
    before = console_engine.audit.list(limit=500).items
    log_in(page, console, "readonly", "/periodic/")
    row = page.locator('tr[data-periodic="browser.readonly"]')
    assert row.count() == 1
    for label in ("Pause", "Resume", "Trigger now", "Delete…"):
        assert page.get_by_role("button", name=label).count() == 0, label
    status = page.evaluate("""async () => {
        const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
        const body = new URLSearchParams({csrfmiddlewaretoken: token});
        const r = await fetch('/periodic/browser.readonly/trigger',
                              {method: 'POST', body, credentials: 'same-origin', redirect: 'manual'});
        return r.status;
    }""")
    assert status == 403
    assert console_engine.periodic.get("browser.readonly")["last_runs"] == []
    assert console_engine.audit.list(limit=500).items == before
