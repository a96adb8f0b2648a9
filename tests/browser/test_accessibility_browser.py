"""The console for the person on call, in headless Chromium against daphne and a real worker: axe-core
finds no serious or critical violation on any page in light or dark mode; at a phone's 375 px no page
scrolls sideways and every action stays visible and clickable; the keyboard reaches everything with a
visible focus ring, starting with a skip link; the palette follows the system's colour scheme.

axe-core is vendored in tests/browser/vendor/ (its README gives the version and license).
DTQ_UPDATE_SCREENSHOTS=1 copies the dark and phone screenshots to docs/screenshots/.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec
from tests.conftest import WorkerProcess, wait_for

from .conftest import log_in
from .server import PASSWORD, ConsoleServer
from .test_console_browser import dead_letter

ROOT = Path(__file__).resolve().parents[2]
AXE = Path(__file__).parent / "vendor" / "axe.min.js"
PHONE = {"width": 375, "height": 812}
# The names other code (the overview's charts) reads from :root; console.css defines each in both schemes.
PALETTE = ("--fg", "--bg", "--muted", "--border", "--surface", "--link", "--ok", "--fail", "--dead", "--retry",
           "--cancel", "--expired", "--accent")


@dataclass(frozen=True, kw_only=True)
class Seeded:
    """What the module's console shows: one of everything, with every action on offer to an admin."""

    running_task: str
    dead_task: str
    workflow: str

    def pages(self) -> dict[str, str]:
        """Every console page a logged-in operator can open (login is the one page seen logged out)."""
        return {
            "overview": "/",
            "queue": "/queues/emails/",
            "purge confirm": "/queues/emails/purge/confirm",
            "tasks": "/tasks/",
            "task (running)": f"/tasks/{self.running_task}/",
            "task (dead-lettered)": f"/tasks/{self.dead_task}/",
            "running": "/tasks/running/",
            "enqueue form": "/tasks/new/",
            "dlq": "/dlq/",
            "dlq confirm": "/dlq/matching/confirm?action=discard",
            "schedule": "/schedule/",
            "periodic": "/periodic/",
            "periodic detail": "/periodic/reports.nightly/",
            "periodic delete confirm": "/periodic/reports.nightly/delete/confirm",
            "workflows": "/workflows/",
            "workflow": f"/workflows/{self.workflow}/",
            "workers": "/workers/",
            "types": "/types/?range=24h",
            "type": "/types/emails.send/?range=7d",
            "audit": "/audit/",
            "404": "/no-such-page/",
        }


@pytest.fixture(scope="module")
def seeded(console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> Seeded:
    engine, admin = console_engine, Actor.user("admin", source="console")
    for i in range(6):
        engine.tasks.enqueue("emails.send", {"to": f"user{i}@example.com", "template": "welcome"}, queue="emails",
                             priority=("high", "normal", "low")[i % 3])
    engine.limits.set("emails", {"concurrency": 2, "rate": {"limit": 5, "period_s": 1}}, actor=admin)
    engine.tasks.enqueue("reports.build", {"report": "yearly"}, queue="reports", delay_seconds=3600)
    dead = dead_letter(engine, "card declined by issuer (code 51)", customer="cus_1042")
    dead_letter(engine, "timeout talking to payments gateway", customer="cus_2001")
    running = engine.tasks.enqueue("dtq.sleep", {"seconds": 600}).id
    engine.periodic.create(PeriodicSpec(name="reports.nightly", type="dtq.echo", payload={"report": "sales"},
                                        cron="0 3 * * *", timezone="Europe/Berlin"), actor=admin)
    fired = engine.periodic.trigger("reports.nightly", actor=admin)["task_id"]
    workflow = engine.workflows.submit({"chain": [{"type": "dtq.echo", "payload": {"n": 1}},
                                                  {"type": "dtq.sleep", "payload": {"seconds": 600}},
                                                  {"type": "dtq.echo"}]})
    engine.queues.pause("reports", admin)
    engine.queues.resume("reports", admin)
    wait_for(lambda: engine.tasks.get(running)["status"] == "RUNNING"
             and engine.tasks.get(fired)["status"] == "SUCCEEDED"
             and engine.workflows.get(workflow)["steps"][1]["status"] == "RUNNING",
             timeout=30, message=worker.output)
    return Seeded(running_task=running, dead_task=dead["task_id"], workflow=workflow)


@pytest.fixture
def phone(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=PHONE, device_scale_factor=2, is_mobile=True, has_touch=True)
    context.set_default_timeout(15000)
    tab = context.new_page()
    tab.on("dialog", lambda dialog: dialog.accept())
    yield tab
    context.close()


def settle(page: Any, path: str) -> None:
    """Wait until the page is what a person looks at: on the overview, the live feed connected."""
    if path == "/":
        page.wait_for_selector("#feed-state[data-state=live]")


def serious_violations(page: Any) -> list[str]:
    """Run axe-core over the page; one line per serious or critical violation, with up to 3 offending nodes."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.add_script_tag(path=str(AXE))
    found = page.evaluate("""async () => {
        const result = await axe.run(document, {resultTypes: ['violations']});
        return result.violations.filter(v => v.impact === 'serious' || v.impact === 'critical').map(v =>
            `${v.impact} ${v.id}: ${v.help} -- ` +
            v.nodes.slice(0, 3)
                   .map(n => n.target.join(' ') + ' [' + (n.failureSummary || '').replace(/\\s+/g, ' ') + ']')
                   .join('; '));
    }""")
    return list(found)


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_serious_violation_on_any_page(
        page: Any, console: ConsoleServer, seeded: Seeded, scheme: str) -> None:
    page.emulate_media(color_scheme=scheme)
    problems: dict[str, list[str]] = {}
    page.goto(f"{console.url}/login/")
    problems["login"] = serious_violations(page)
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button:has-text('Log in')")
    page.wait_for_url(f"{console.url}/")
    for name, path in seeded.pages().items():
        response = page.goto(console.url + path)
        assert response is not None and response.status == (404 if name == "404" else 200), (name, path)
        settle(page, path)
        problems[name] = serious_violations(page)
    failing = {name: found for name, found in problems.items() if found}
    assert not failing, "\n".join(f"{name}: {line}" for name, lines in failing.items() for line in lines)


def test_the_palette_follows_the_system_colour_scheme(page: Any, console: ConsoleServer) -> None:
    read = """(names) => {
        const root = getComputedStyle(document.documentElement);
        return {vars: Object.fromEntries(names.map(n => [n, root.getPropertyValue(n).trim()])),
                body: getComputedStyle(document.body).backgroundColor};
    }"""
    page.goto(f"{console.url}/login/")
    light = page.evaluate(read, list(PALETTE))
    page.emulate_media(color_scheme="dark")
    dark = page.evaluate(read, list(PALETTE))
    # Every name is defined in both schemes, and the page itself turns dark.
    assert all(light["vars"].values()) and all(dark["vars"].values()), (light, dark)
    for name in ("--fg", "--bg", "--surface", "--muted", "--link"):
        assert light["vars"][name] != dark["vars"][name], name
    assert _luminance(light["body"]) > 0.8 and _luminance(dark["body"]) < 0.1, (light["body"], dark["body"])


def test_at_375_px_no_page_scrolls_sideways_and_every_action_is_in_reach(
        phone: Any, console: ConsoleServer, seeded: Seeded) -> None:
    page = phone
    page.goto(f"{console.url}/login/")
    assert _overflow(page) <= PHONE["width"]
    _reachable(page, page.get_by_role("button", name="Log in", exact=True))
    log_in(page, console, "admin")
    # The buttons and links an operator needs on each page; each must be on screen and take a click.
    actions: dict[str, list[tuple[str, str | re.Pattern[str]]]] = {
        "/queues/emails/": [("button", "Pause"), ("button", "Purge…"), ("button", "Delete"),
                            ("button", "Save limits"), ("button", "Clear limits")],
        "/queues/emails/purge/confirm": [("button", re.compile(r"^Purge \d+ waiting tasks?$")), ("link", "Keep them")],
        "/tasks/": [("link", "Enqueue a task…"), ("link", "Running now"), ("button", "Filter")],
        f"/tasks/{seeded.running_task}/": [("button", "Cancel")],
        f"/tasks/{seeded.dead_task}/": [("button", "Retry"), ("button", "Discard")],
        "/tasks/new/": [("combobox", "Task type"), ("textbox", "Payload (JSON)"), ("button", "Enqueue")],
        "/dlq/": [("button", "Retry all matching…"), ("button", "Discard all matching…"),
                  ("checkbox", "Select all on this page"), ("link", "Retry group…"), ("link", "Discard group…")],
        "/dlq/matching/confirm?action=discard": [("button", re.compile(r"^Discard \d+ dead letters?$"))],
        "/periodic/": [("button", "Pause"), ("button", "Trigger now"), ("button", "Delete…")],
        "/periodic/reports.nightly/": [("button", "Pause"), ("button", "Trigger now"), ("button", "Delete…")],
        "/periodic/reports.nightly/delete/confirm": [("button", "Delete reports.nightly")],
        f"/workflows/{seeded.workflow}/": [("button", "Cancel workflow")],
    }
    for path in seeded.pages().values():
        page.goto(console.url + path)
        settle(page, path)
        assert _overflow(page) <= PHONE["width"], f"{path} scrolls sideways: {_widest(page)}"
        nav = page.get_by_role("navigation", name="Console").get_by_role("link")
        assert nav.count() == 9
        for i in range(nav.count()):
            _reachable(page, nav.nth(i))
        _reachable(page, page.get_by_role("searchbox", name="Task id"))
        for role, name in actions.get(path, []):
            _reachable(page, page.get_by_role(role, name=name, exact=True).first)
    # Each dead letter's own buttons too, and its checkbox, on its card.
    page.goto(f"{console.url}/dlq/")
    for row in page.locator("#dlq-table tbody tr").all():
        for role, name in (("checkbox", None), ("button", "Retry"), ("button", "Discard")):
            _reachable(page, row.get_by_role(role, name=name, exact=True) if name else row.get_by_role(role))
        # Each cell says which column it is: the card is read as "Queue default", "Error ...".
        assert row.locator('td[data-label="Error"]').is_visible()
        assert row.evaluate("r => getComputedStyle(r.querySelector('td[data-label=Error]'), '::before').content") \
            == '"Error"'


@pytest.mark.parametrize("width", [480, 768, 861, 1024, 1280])
def test_no_page_scrolls_sideways_at_tablet_and_laptop_widths(
        browser: Any, console: ConsoleServer, seeded: Seeded, width: int) -> None:
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    try:
        log_in(page, console, "admin")
        wide = {}
        for path in seeded.pages().values():
            page.goto(console.url + path)
            if _overflow(page) > width:
                wide[path] = _widest(page)
        assert not wide, wide
    finally:
        context.close()


def test_at_375_px_an_operator_pauses_and_resumes_a_queue_and_retries_a_dead_letter(
        phone: Any, console: ConsoleServer, console_engine: Engine, seeded: Seeded) -> None:
    page = phone
    log_in(page, console, "admin", "/queues/emails/")
    page.get_by_role("button", name="Pause", exact=True).click()
    page.wait_for_selector(".msg-success")
    assert "Paused queue emails" in page.inner_text(".messages")
    assert console_engine.queues.get("emails")["paused"] is True
    page.get_by_role("button", name="Resume", exact=True).click()
    page.wait_for_selector(".msg-success")
    assert "Resumed queue emails" in page.inner_text(".messages")
    assert console_engine.queues.get("emails")["paused"] is False

    entry = dead_letter(console_engine, "retried from a phone")
    page.goto(f"{console.url}/dlq/")
    row = page.locator(f'tr[data-entry="{entry["entry_id"]}"]')
    row.get_by_role("button", name="Retry", exact=True).click()
    page.wait_for_selector(".msg-success")
    assert "Retried 1 of 1 selected dead letter" in page.inner_text(".messages")
    assert _overflow(page) <= PHONE["width"]


def test_the_keyboard_reaches_every_control_with_a_visible_focus_ring(
        page: Any, console: ConsoleServer, seeded: Seeded) -> None:
    log_in(page, console, "admin", "/dlq/")
    # The first Tab lands on "Skip to content", drawn on screen; Enter moves focus past the navigation.
    page.keyboard.press("Tab")
    skip = page.get_by_role("link", name="Skip to content")
    assert skip.evaluate("el => el === document.activeElement")
    box = skip.bounding_box()
    assert box is not None and box["y"] >= 0 and box["width"] > 20
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "content"
    assert page.url.endswith("#content")
    for path in ("/dlq/", "/queues/emails/", f"/workflows/{seeded.workflow}/", "/tasks/new/"):
        page.goto(console.url + path)
        unringed, reached = _tab_through(page)
        assert reached > 5, path
        assert not unringed, f"{path}: focused without a visible focus ring: {unringed}"
        # Everything focusable on the page was reached by Tab (nothing needs a mouse).
        focusable = page.evaluate("""() => [...document.querySelectorAll(
            'a[href], button, input:not([type=hidden]), select, textarea, [tabindex]:not([tabindex="-1"])')]
            .filter(el => !el.disabled && el.getClientRects().length).length""")
        assert reached >= focusable, (path, reached, focusable)


def test_screenshots_in_dark_mode_and_on_a_phone(
        browser: Any, console: ConsoleServer, seeded: Seeded, tmp_path: Path) -> None:
    shots = {"overview-dark": ("/", "dark", {"width": 1440, "height": 900}),
             "dlq-dark": ("/dlq/", "dark", {"width": 1440, "height": 900}),
             "queue-phone": ("/queues/emails/", "light", PHONE),
             "dlq-phone-dark": ("/dlq/", "dark", PHONE)}
    for name, (path, scheme, viewport) in shots.items():
        context = browser.new_context(viewport=viewport, color_scheme=scheme)
        tab = context.new_page()
        try:
            log_in(tab, console, "admin", path)
            settle(tab, path)
            out = tmp_path / f"{name}.png"
            tab.screenshot(path=str(out), full_page=name != "queue-phone")  # a phone's first screen
            assert out.stat().st_size > 10_000
        finally:
            context.close()
    if os.environ.get("DTQ_UPDATE_SCREENSHOTS") == "1":
        for name in shots:
            shutil.copy(tmp_path / f"{name}.png", ROOT / "docs" / "screenshots" / f"{name}.png")


def _reachable(page: Any, locator: Any) -> None:
    """The control is on screen within the phone's width and takes a click (a trial: nothing is sent)."""
    locator.scroll_into_view_if_needed()
    assert locator.is_visible(), locator
    box = locator.bounding_box()
    assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"] + 0.5, (locator, box)
    locator.click(trial=True, timeout=5000)  # visible, stable, enabled and not covered by anything


def _overflow(page: Any) -> int:
    return int(page.evaluate("document.documentElement.scrollWidth"))


def _widest(page: Any) -> list[str]:
    """The elements that reach past the viewport's right edge (for the failure message)."""
    return list(page.evaluate("""() => [...document.querySelectorAll('body *')]
        .filter(el => el.getBoundingClientRect().right > window.innerWidth + 0.5)
        .slice(0, 8).map(el => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '') +
            (typeof el.className === 'string' && el.className ? '.' + el.className.split(' ').join('.') : '') +
            ' ' + Math.round(el.getBoundingClientRect().right))"""))


def _tab_through(page: Any, limit: int = 150) -> tuple[list[str], int]:
    """Press Tab until focus leaves the page; return the elements focused without a ring, and how many."""
    unringed: list[str] = []
    seen: set[str] = set()
    page.evaluate("document.activeElement && document.activeElement.blur()")
    for _ in range(limit):
        page.keyboard.press("Tab")
        state = page.evaluate("""() => {
            const el = document.activeElement;
            if (!el || el === document.body) return null;
            const s = getComputedStyle(el), rect = el.getBoundingClientRect();
            const key = el.outerHTML.slice(0, 160) + '@' + Math.round(rect.x) + ',' + Math.round(rect.y);
            const ring = (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2)
                || (el.matches('.wf-node') && parseFloat(getComputedStyle(el.querySelector('rect')).strokeWidth) >= 3);
            const text = (el.textContent || el.name || '').trim().slice(0, 40);
            return {key, ring, what: el.tagName.toLowerCase() + ' ' + text};
        }""")
        if state is None or state["key"] in seen:
            break
        seen.add(state["key"])
        if not state["ring"]:
            unringed.append(state["what"])
    return unringed, len(seen)


def _luminance(css_rgb: str) -> float:
    channels = [int(c) / 255 for c in css_rgb[css_rgb.index("(") + 1:css_rgb.index(")")].split(",")[:3]]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


@pytest.fixture(autouse=True)
def _worker_alive(request: pytest.FixtureRequest) -> None:
    if "worker" in request.fixturenames:
        proc = request.getfixturevalue("worker")
        assert proc.proc.poll() is None, proc.output()[-3000:]
