"""A workflow's page in headless Chromium against daphne and a real worker: the graph is drawn with a
box per step that reaches its task, the progress bar shows the steps finished, and an admin cancels
a running workflow through the page (confirm dialog), audited as the admin."""

from __future__ import annotations

from typing import Any

from dtq_core.engine import Engine
from tests.conftest import WorkerProcess, wait_for

from .conftest import log_in
from .server import ConsoleServer


def test_the_graph_links_each_step_to_its_task_and_an_admin_cancels_the_workflow(
        page: Any, console: ConsoleServer, console_engine: Engine, worker: WorkerProcess) -> None:
    # A first step the module's worker runs at once, then one that sleeps, then one left waiting.
    wid = console_engine.workflows.submit({"chain": [{"type": "dtq.echo", "payload": {"n": 1}},
                                                     {"type": "dtq.sleep", "payload": {"seconds": 30}},
                                                     {"type": "dtq.echo"}]})
    wait_for(lambda: [s["status"] for s in console_engine.workflows.get(wid)["steps"]][:2] == ["SUCCEEDED", "RUNNING"],
             timeout=20, message=worker.output)
    log_in(page, console, "admin", f"/workflows/{wid}/")
    graph = page.get_by_role("group", name="Workflow steps as a graph")
    assert graph.is_visible()
    boxes = graph.locator("a.wf-node")
    assert boxes.count() == 3
    assert [boxes.nth(i).get_attribute("class") for i in range(3)] == [
        "wf-node st-succeeded", "wf-node st-running", "wf-node st-waiting"]
    progress = page.get_by_role("progressbar", name="Progress")
    assert progress.get_attribute("value") == "33"
    first_task = console_engine.workflows.get(wid)["steps"][0]["task_id"]
    boxes.nth(0).click()
    page.wait_for_url(f"{console.url}/tasks/{first_task}/")
    assert "SUCCEEDED" in page.inner_text("h1")
    page.get_by_role("link", name=wid).click()  # the task page links back to its workflow
    page.wait_for_url(f"{console.url}/workflows/{wid}/")
    page.get_by_role("button", name="Cancel workflow").click()  # confirm(): accepted
    page.wait_for_selector(".msg-success")
    assert f"Cancelled workflow {wid}" in page.inner_text(".messages")
    assert "CANCELLED" in page.inner_text("h1")
    wait_for(lambda: [s["status"] for s in console_engine.workflows.get(wid)["steps"]] ==
             ["SUCCEEDED", "CANCELLED", "CANCELLED"], timeout=20, message=worker.output)
    entry = next(e for e in console_engine.audit.list(limit=50).items if e["action"] == "workflow.cancel")
    assert entry["actor"] == "user:admin" and entry["source"] == "console"


def test_the_page_follows_the_workflow_live(page: Any, console: ConsoleServer, console_engine: Engine,
                                            worker: WorkerProcess) -> None:
    wid = console_engine.workflows.submit({"chain": [{"type": "dtq.sleep", "payload": {"seconds": 30}},
                                                     {"type": "dtq.echo"}]})
    wait_for(lambda: console_engine.workflows.get(wid)["steps"][0]["status"] == "RUNNING", timeout=20,
             message=worker.output)
    log_in(page, console, "admin", f"/workflows/{wid}/")
    page.wait_for_function("document.body.dataset.feed === 'live'")
    assert "RUNNING" in page.inner_text("h1")
    from dtq_core.engine.audit import Actor
    console_engine.workflows.cancel(wid, Actor(name="cli:ops", source="cli"))  # elsewhere: the CLI, say
    page.wait_for_function("document.querySelector('h1').innerText.includes('CANCELLED')", timeout=15000)
    assert page.locator("a.wf-node.st-cancelled").count() == 2
