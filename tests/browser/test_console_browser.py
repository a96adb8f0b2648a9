"""End to end in headless Chromium against daphne and a real worker: log in, live feed, click to
retry a dead letter and see the audit entry, a non-staff user cannot act, hostile text stays text."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec
from tests.conftest import WorkerProcess, wait_for

from .conftest import log_in
from .server import ConsoleServer

ROOT = Path(__file__).resolve().parents[2]
XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=1</script>'


def dead_letter(engine: Engine, message: str, **payload: Any) -> dict[str, Any]:
    """Let the real worker dead-letter a failing task; return the DLQ entry."""
    task_id = engine.tasks.enqueue("dtq.fail", {"retryable": False, "message": message, **payload}).id
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "DEAD_LETTERED", timeout=20,
             message="the worker did not dead-letter the task")
    return engine.dlq.get(engine.tasks.get(task_id)["dlq_entry_id"])


def test_login_then_a_task_appears_in_the_live_feed_without_reload(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    log_in(page, console, "admin")
    page.wait_for_selector("#feed-state[data-state=live]")
    task_id = console_engine.tasks.enqueue("dtq.echo", {"hello": "feed"}).id
    # It should show the task's events as they happen, ending with SUCCEEDED, with no reload.
    page.wait_for_selector(f'#feed tr[data-event-task="{task_id}"] .badge[data-status=SUCCEEDED]', timeout=20000)
    assert page.locator(f'#feed tr[data-event-task="{task_id}"]').count() >= 2
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_a_task_page_and_a_queue_page_follow_changes_made_elsewhere(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    # An operator watching a running task sees it finish (and its Cancel button go) without
    # reloading; one watching a paused queue sees a resume made from the API or CLI.
    log_in(page, console, "admin")
    task_id = console_engine.tasks.enqueue("dtq.sleep", {"seconds": 4}).id
    wait_for(lambda: console_engine.tasks.get(task_id)["status"] == "RUNNING", timeout=20,
             message="the worker did not start the task")
    page.goto(f"{console.url}/tasks/{task_id}/")
    page.wait_for_function("document.body.dataset.feed === 'live'")  # listening (no feed table here)
    assert page.locator("button", has_text="Cancel").count() == 1
    # The badge changes in place at once; the page then reloads for the rest (no Cancel any more).
    page.wait_for_selector("button:has-text('Cancel')", state="detached", timeout=20000)
    assert page.locator('h1 .badge[data-status=SUCCEEDED]').count() == 1
    assert page.evaluate("performance.getEntriesByType('navigation')[0].type") == "reload"

    console_engine.tasks.enqueue("dtq.echo", queue="followed", delay_seconds=3600)
    console_engine.queues.pause("followed", Actor.cli())
    page.goto(f"{console.url}/queues/followed/")
    page.wait_for_function("document.body.dataset.feed === 'live'")
    assert page.locator("button", has_text="Resume").count() == 1
    console_engine.queues.resume("followed", Actor.cli())
    page.wait_for_selector("button:has-text('Pause')", timeout=20000)
    assert page.locator("button", has_text="Resume").count() == 0


def test_the_overview_says_when_its_queues_changed_since_it_loaded(
        page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    # Queue rows are rendered by the server; a queue that appears later must not go unmentioned.
    log_in(page, console, "admin")
    page.goto(f"{console.url}/")
    page.wait_for_function("document.body.dataset.feed === 'live'")
    assert page.locator("#shape-changed").is_hidden()
    console_engine.tasks.enqueue("dtq.echo", queue=f"appeared-{os.getpid()}", delay_seconds=3600)
    page.wait_for_selector("#shape-changed", state="visible", timeout=15000)
    page.click("#shape-changed a")
    page.wait_for_selector(f'tr[data-queue="appeared-{os.getpid()}"]', timeout=10000)
    assert page.locator("#shape-changed").is_hidden()


def test_the_feed_dedups_by_event_id(page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    page.goto(console.url + "/")
    page.wait_for_selector("#feed-state[data-state=live]")
    event = {"event_id": "1-dup", "type": "task.queued", "task_id": "dup-task", "queue": "default",
             "status": "QUEUED", "attempt": 0, "ts": "2026-01-01T00:00:00.000Z"}

    def published_twice() -> bool:
        console_engine.client.publish(console_engine.keys.events(), json.dumps(event))
        return page.evaluate("window.dtqFeed.duplicates") >= 1

    wait_for(published_twice, timeout=10, interval=0.2)
    assert page.locator('#feed tr[data-event-task="dup-task"]').count() == 1


def test_the_page_reconnects_after_a_server_restart_and_rereads_state(
        page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    page.goto(console.url + "/")
    page.wait_for_selector("#feed-state[data-state=live]")
    console.crash()
    page.wait_for_selector("#feed-state[data-state=reconnecting]")
    before = console_engine.queues.stats()
    for _ in range(3):  # changes made while the page is cut off: their events are lost
        console_engine.tasks.enqueue("t.offline", queue="offline")
    expected = f"{sum(q['waiting'] for q in before) + 3:,}"
    console.start()  # the same port, like a restarted API process
    page.wait_for_selector("#feed-state[data-state=live]", timeout=30000)
    page.wait_for_function("(want) => document.querySelector('[data-total=waiting]').textContent === want",
                           arg=expected)
    assert page.evaluate("window.dtqFeed.reconnects") >= 1
    assert page.evaluate("performance.getEntriesByType('navigation').length") == 1


def test_an_admin_retries_a_dead_letter_with_a_click_and_sees_the_audit_entry(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    entry = dead_letter(console_engine, "card declined")
    log_in(page, console, "admin", "/dlq/")
    row = page.locator(f'tr[data-entry="{entry["entry_id"]}"]')
    row.get_by_role("button", name="Retry").click()
    page.wait_for_selector(".msg-success")
    assert "Retried 1 of 1 selected dead letter" in page.inner_text(".messages")
    assert page.locator(f'tr[data-entry="{entry["entry_id"]}"]').count() == 0
    page.click("nav >> text=Audit")
    first = page.locator("#audit-table tbody tr").first
    assert "user:admin" in first.inner_text() and "dlq.retry" in first.inner_text()
    assert "console" in first.inner_text()


def test_a_non_staff_user_sees_no_buttons_and_a_forged_post_is_refused(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    entry = dead_letter(console_engine, "not for viewers")
    audit_before = console_engine.audit.list(limit=500).items
    log_in(page, console, "viewer", "/dlq/")
    assert page.get_by_role("button", name="Retry").count() == 0
    assert page.get_by_role("button", name="Discard").count() == 0
    # The hidden button is refused at the endpoint too: forge the POST with a valid CSRF token.
    status = page.evaluate("""async (eid) => {
        const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
        const body = new URLSearchParams({ids: eid, csrfmiddlewaretoken: token});
        const r = await fetch('/dlq/retry', {method: 'POST', body, credentials: 'same-origin', redirect: 'manual'});
        return r.status;
    }""", entry["entry_id"])
    assert status == 403
    assert console_engine.dlq.get(entry["entry_id"])["entry_id"] == entry["entry_id"]
    assert console_engine.audit.list(limit=500).items == audit_before


def test_hostile_payloads_and_errors_render_as_text(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    entry = dead_letter(console_engine, XSS, note=XSS)
    waiting = console_engine.tasks.enqueue("dtq.echo", {"html": XSS}, queue="xss-waiting").id
    pages = ["/dlq/", f"/tasks/{entry['task_id']}/", "/queues/xss-waiting/", f"/tasks/{waiting}/",
             "/dlq/?q=" + "onerror", "/"]
    page.add_init_script("window.__xss = 0")
    for path in pages:
        page.goto(console.url + path)
        assert page.evaluate("window.__xss") == 0, path
        assert page.locator("img[src=x]").count() == 0, path
    page.goto(f"{console.url}/tasks/{entry['task_id']}/")
    assert json.dumps(XSS)[1:-1] in page.inner_text("#payload")  # shown as JSON text, quotes escaped
    page.goto(f"{console.url}/dlq/")
    assert XSS in page.locator(f'tr[data-entry="{entry["entry_id"]}"] td.err').inner_text()


def test_screenshots_of_the_main_pages(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess, tmp_path: Path) -> None:
    """Seed a realistic picture and photograph overview, queue, task, dlq, audit, periodic and a workflow.

    DTQ_UPDATE_SCREENSHOTS=1 copies them to docs/screenshots/ (the README shows those).
    """
    engine = console_engine
    for i in range(12):
        engine.tasks.enqueue("emails.send", {"to": f"user{i}@example.com", "template": "welcome"}, queue="emails",
                             priority=("high", "normal", "low")[i % 3])
    # The queue page shows its limits (issue 22): no worker serves emails, so nothing is in use.
    engine.limits.set("emails", {"concurrency": 2, "rate": {"limit": 5, "period_s": 1}, "group_concurrency": 1},
                      actor=_actor("admin"))
    for i in range(5):
        engine.tasks.enqueue("reports.build", {"report": "monthly", "month": i + 1}, queue="reports")
    engine.tasks.enqueue("reports.build", {"report": "yearly"}, queue="reports", delay_seconds=3600)
    failed = dead_letter(engine, "card declined by issuer (code 51)", customer="cus_1042", amount=1999)
    for message in ("card declined by issuer (code 51)", "timeout talking to payments gateway",
                    "timeout talking to payments gateway"):
        dead_letter(engine, message, customer="cus_2001")
    done = engine.tasks.enqueue("dtq.echo", {"greeting": "hello", "items": [1, 2, 3]}).id
    wait_for(lambda: engine.tasks.get(done)["status"] == "SUCCEEDED", timeout=20)
    engine.periodic.create(PeriodicSpec(name="reports.nightly", type="dtq.echo", payload={"report": "sales"},
                                        cron="0 3 * * *", timezone="Europe/Berlin", overlap="skip",
                                        misfire="run_once"), actor=_actor("admin"))
    engine.periodic.create(PeriodicSpec(name="cache.warm", type="dtq.echo", every_seconds=900), actor=_actor("admin"))
    engine.periodic.pause("cache.warm", actor=_actor("admin"))
    fired = engine.periodic.trigger("reports.nightly", actor=_actor("admin"))["task_id"]
    wait_for(lambda: engine.tasks.get(fired)["status"] == "SUCCEEDED", timeout=20)
    # A workflow part way through (issue 23): fetched, rendered in three parts, publishing, then mailed.
    wid = engine.workflows.submit({"chain": [
        {"type": "dtq.echo", "payload": {"report": "sales", "month": 11}},
        {"group": [{"type": "dtq.echo", "payload": {"page": n}} for n in range(1, 4)],
         "then": {"type": "dtq.sleep", "payload": {"seconds": 30}}},
        {"type": "emails.send", "payload": {"to": "finance@example.com", "template": "report-ready"},
         "queue": "emails"}]})
    wait_for(lambda: engine.workflows.get(wid)["steps"][4]["status"] == "RUNNING", timeout=20)
    log_in(page, console, "admin")
    engine.queues.pause("reports", _actor("admin"))
    page.goto(f"{console.url}/queues/reports/")
    page.click("button:has-text('Resume')")
    page.wait_for_selector(".msg-success")
    _seed_history(engine)
    shots = {"overview": "/?range=24h", "queue": "/queues/emails/?range=24h", "task": f"/tasks/{failed['task_id']}/",
             "dlq": "/dlq/", "audit": "/audit/", "periodic": "/periodic/", "workflow": f"/workflows/{wid}/",
             "types": "/types/?range=24h"}
    for name, path in shots.items():
        page.goto(console.url + path)
        if name == "overview":
            page.wait_for_selector("#feed-state[data-state=live]")
            engine.tasks.enqueue("dtq.echo", {"n": 1})
            engine.tasks.enqueue("dtq.flaky", {"fail_times": 1})
            page.wait_for_selector("#feed tbody tr >> nth=3", timeout=20000)
        if name == "task":
            page.click("details summary")
        path_out = tmp_path / f"{name}.png"
        page.screenshot(path=str(path_out), full_page=True)
        assert path_out.stat().st_size > 10_000
    if os.environ.get("DTQ_UPDATE_SCREENSHOTS") == "1":
        target = ROOT / "docs" / "screenshots"
        target.mkdir(parents=True, exist_ok=True)
        for name in shots:
            shutil.copy(tmp_path / f"{name}.png", target / f"{name}.png")


def _actor(name: str) -> Any:
    return Actor.user(name, source="console")


def _seed_history(engine: Engine) -> None:
    """A day of traffic in the history keys, as workers and the leader write them: a daily swell of
    emails and reports, a few retries, a bad half hour of dead letters, realistic wait and run
    times (buckets, dtq_core/history.py), the roll-ups and the queues' waiting tasks."""
    import math
    import random

    from dtq_core.history import MINUTE_TTL_MS, bucket_of

    rng = random.Random(24)
    k, client = engine.keys, engine.client
    now_min = engine.clock.now_ms() // 60000
    kinds = {"emails": [("emails.send", 60, 35.0, 4.0), ("emails.digest", 6, 900.0, 40.0)],
             "reports": [("reports.build", 3, 4200.0, 150.0)], "default": [("dtq.echo", 20, 2.0, 1.5)]}
    tags = {queue: engine.registry.ensure(queue).tags[0] for queue in kinds}
    pipe = client.pipeline(transaction=False)
    for m in range(now_min - 1439, now_min - 2):
        swell = 0.55 + 0.45 * math.sin((m % 1440) / 1440 * 2 * math.pi)
        total: dict[str, int] = {}
        by_type: dict[str, int] = {}
        depth = {"*": 0}
        for queue, types in kinds.items():
            fields: dict[str, int] = {}
            for ttype, rate, run_ms, wait_ms in types:
                n = max(0, int(rng.gauss(rate * swell, rate * 0.15)))
                bad = now_min - 300 < m < now_min - 270 and ttype == "emails.send"
                counts = {"s": n - (n // 4 if bad else 0), "d": n // 4 if bad else int(rng.random() < 0.02),
                          "r": int(rng.random() < 0.1) + (n // 8 if bad else 0)}
                for _ in range(min(n, 30)):
                    w = f"w{bucket_of(rng.lognormvariate(math.log(wait_ms * (1 + 3 * swell)), 0.6))}"
                    r = f"r{bucket_of(rng.lognormvariate(math.log(run_ms), 0.35))}"
                    counts[w] = counts.get(w, 0) + max(1, n // 30)
                    counts[r] = counts.get(r, 0) + max(1, n // 30)
                for metric, c in counts.items():
                    if c:
                        fields[f"{ttype}|{metric}"] = c
                        total[metric] = total.get(metric, 0) + c
                        by_type[f"{ttype}|{metric}"] = by_type.get(f"{ttype}|{metric}", 0) + c
            depth[queue] = int(max(0, rng.gauss(400 * swell, 60))) if queue == "emails" else rng.randint(0, 5)
            depth["*"] += depth[queue]
            if fields:
                pipe.hset(f"{k.history(tags[queue])}m:{m}", mapping=fields)
                pipe.pexpire(f"{k.history(tags[queue])}m:{m}", MINUTE_TTL_MS)
        for scope, values in (("all", total), ("types", by_type), ("depth", depth)):
            if not values:
                continue
            pipe.hset(f"{k.global_history(scope)}m:{m}", mapping=values)
            pipe.pexpire(f"{k.global_history(scope)}m:{m}", MINUTE_TTL_MS)
    pipe.execute()


@pytest.fixture(autouse=True)
def _worker_alive(request: pytest.FixtureRequest) -> None:
    if "worker" in request.fixturenames:
        proc = request.getfixturevalue("worker")
        assert proc.proc.poll() is None, proc.output()[-3000:]
