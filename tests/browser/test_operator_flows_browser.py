"""What an operator does by hand, in headless Chromium against daphne (issue 24, items 3-5):
search tasks by text and id, enqueue a task from the form (a bad payload first), and delete an
empty queue (confirmed in a dialog) while a queue with work is refused."""

from __future__ import annotations

from typing import Any

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from tests.conftest import wait_for

from .conftest import log_in
from .server import ConsoleServer


def test_search_by_text_and_by_the_start_of_an_id(page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    hit = console_engine.tasks.enqueue("dtq.echo", {"order": "ORD-5531"}, queue="search-b", delay_seconds=600).id
    miss = console_engine.tasks.enqueue("dtq.echo", {"order": "ORD-9000"}, queue="search-b", delay_seconds=600).id
    log_in(page, console, "admin", "/tasks/")
    search = page.get_by_role("search", name="Search tasks")
    search.get_by_label("Text in payload or error").fill("ord-5531")
    search.get_by_role("button", name="Filter").click()
    page.wait_for_url("**/tasks/?*q=ord-5531*")
    assert page.locator("tr[data-task]").count() == 1
    assert page.locator(f'tr[data-task="{hit}"]').count() == 1
    page.goto(f"{console.url}/tasks/")
    search.get_by_label("Task id").fill(miss[:16])
    search.get_by_role("button", name="Filter").click()
    page.wait_for_selector(f'tr[data-task="{miss}"]')
    assert page.locator("tr[data-task]").count() == 1


def test_enqueue_from_the_form_after_a_bad_payload(page: Any, console: ConsoleServer, console_engine: Engine) -> None:
    log_in(page, console, "admin", "/tasks/new/")
    page.get_by_label("Task type").fill("dtq.echo")
    page.get_by_label("Queue").fill("from-form")
    page.get_by_label("Payload (JSON)").fill('{"greeting": hello}')
    page.get_by_role("button", name="Enqueue").click()
    page.wait_for_selector("text=payload")
    assert "/tasks/new/" in page.url and page.get_by_label("Payload (JSON)").input_value() == '{"greeting": hello}'
    assert "from-form" not in console_engine.queues.names()  # nothing was enqueued
    page.get_by_label("Payload (JSON)").fill('{"greeting": "hello"}')
    page.get_by_role("button", name="Enqueue").click()
    page.wait_for_url("**/tasks/*-*/")
    task_id = page.url.rstrip("/").rsplit("/", 1)[1]
    task = console_engine.tasks.get(task_id)
    assert task["queue"] == "from-form" and task["payload"] == {"greeting": "hello"}
    assert any(e["action"] == "task.enqueue" for e in console_engine.audit.list().items)


def test_delete_an_empty_queue_and_be_refused_one_with_work(page: Any, console: ConsoleServer,
                                                           console_engine: Engine) -> None:
    actor = Actor(name="cli:test", source="cli")
    console_engine.queues.pause("empty-soon", actor)  # a queue that never saw a task
    console_engine.queues.resume("empty-soon", actor)
    console_engine.tasks.enqueue("dtq.echo", queue="busy-q", delay_seconds=600)
    log_in(page, console, "admin", "/queues/busy-q/")
    page.get_by_role("button", name="Delete").click()  # the dialog is accepted (conftest)
    page.wait_for_selector(".msg-error, .msg-warning")
    assert "busy-q" in console_engine.queues.names()
    page.goto(f"{console.url}/queues/empty-soon/")
    page.get_by_role("button", name="Delete").click()
    page.wait_for_selector(".msg-success")
    assert "Deleted queue empty-soon" in page.locator(".messages").inner_text()
    wait_for(lambda: "empty-soon" not in console_engine.queues.names(), timeout=5)
    assert page.locator('tr[data-queue="empty-soon"]').count() == 0


def test_worker_heartbeats_and_counts_move_without_a_reload(page: Any, console: ConsoleServer, console_engine: Engine,
                                                            worker: Any) -> None:
    wait_for(lambda: any(w["id"] == "browser-worker" for w in console_engine.workers.list()), timeout=20,
             message=worker.output)
    log_in(page, console, "admin", "/workers/")
    row = page.locator('tr[data-worker="browser-worker"]')
    row.wait_for()
    page.evaluate("window.__notReloaded = true")
    processed = row.locator("[data-f=processed]")
    before = int((processed.text_content() or "0").replace(",", ""))
    beat = row.locator("[data-f=heartbeat]").get_attribute("title")
    ids = [console_engine.tasks.enqueue("dtq.echo", {"n": i}).id for i in range(3)]
    wait_for(lambda: all(console_engine.tasks.get(t)["status"] == "SUCCEEDED" for t in ids), timeout=20)
    wait_for(lambda: int((processed.text_content() or "0").replace(",", "")) >= before + 3, timeout=20,
             interval=0.2, message=lambda: f"processed still {processed.text_content()}")
    # A later heartbeat shown (its time is the cell's title; the age may read the same each time).
    wait_for(lambda: row.locator("[data-f=heartbeat]").get_attribute("title") != beat, timeout=20, interval=0.2)
    assert page.evaluate("window.__notReloaded") is True
    row.get_by_role("link", name="browser-worker").click()
    page.wait_for_url("**/workers/browser-worker/")
    assert page.get_by_role("heading", level=1).inner_text().startswith("Worker browser-worker")
