"""The console's /workflows/ pages (issue 23): the list, a workflow drawn as an SVG graph whose boxes
link to their tasks, cancel as POST + CSRF by staff with the cancel permission (audited, a
message), the task page's link to its workflow, 404 and 400 pages."""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import Any

from django.contrib.messages import get_messages
from django.test import Client

from dtq_core.engine import Engine

from ..conftest import next_millisecond
from .conftest import run_burst

HOSTILE = '<script>alert("x")</script>'
TREE = {"chain": [{"type": "dtq.echo", "payload": {"html": HOSTILE}, "queue": "wf"},
                  {"group": [{"type": "dtq.echo", "payload": i, "queue": "wf"} for i in range(3)],
                   "then": {"type": "dtq.echo", "queue": "wf"}}]}


def test_the_list_shows_workflows_newest_first_and_filters(client: Client, live_engine: Engine) -> None:
    first = live_engine.workflows.submit(TREE)
    next_millisecond(live_engine)  # a later creation time: same-ms workflows are listed by id
    second = live_engine.workflows.submit({"chain": [{"type": "dtq.echo"}]})
    page = client.get("/workflows/").content.decode()
    assert page.index(second[:18]) < page.index(first[:18])
    assert "0 of 5" in page and 'aria-current="page">Workflows</a>' in page
    assert second[:18] not in client.get("/workflows/", {"status": "SUCCEEDED"}).content.decode()
    assert client.get("/workflows/", {"status": "NOPE"}).status_code == 400
    assert "No workflows" in client.get("/workflows/", {"status": "FAILED"}).content.decode()


def test_a_workflow_is_drawn_with_a_box_per_step_linking_its_task(client: Client, live_engine: Engine) -> None:
    wid = live_engine.workflows.submit(TREE)
    steps = live_engine.workflows.get(wid)["steps"]
    page = client.get(f"/workflows/{wid}/").content.decode()
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert len(re.findall(r'<a href="/tasks/[^"]+/" class="wf-node', svg)) == 5
    assert f'href="/tasks/{steps[0]["task_id"]}/" class="wf-node st-queued"' in svg
    assert svg.count('class="wf-node st-waiting"') == 4
    assert svg.count('class="wf-edge"') == 3 + 3  # the first step to each member, each member to `then`
    assert 'aria-label="dtq.echo #4 · WAITING, on queue wf"' in svg  # its visible words first
    assert HOSTILE not in page and 'aria-labelledby="wf-progress-label"' in page and ">Cancel workflow</button>" \
        not in page  # a reader has nothing to press
    task_page = client.get(f"/tasks/{steps[0]['task_id']}/").content.decode()
    assert f'href="/workflows/{wid}/"' in task_page and "step 0" in task_page


def test_a_failed_workflow_shows_why_and_offers_no_cancel(login: Callable[[str], Client],
                                                          live_engine: Engine) -> None:
    wid = live_engine.workflows.submit({"chain": [{"type": "dtq.fail", "payload": {"message": "boom"},
                                                   "max_attempts": 1, "queue": "wf"}, {"type": "dtq.echo"}]})
    deadline = time.monotonic() + 20
    while live_engine.workflows.get(wid)["status"] == "RUNNING":  # a real (burst) worker runs the steps
        assert time.monotonic() < deadline
        run_burst(live_engine)
    wf = live_engine.workflows.get(wid)
    page = login("operator").get(f"/workflows/{wid}/").content.decode()
    svg = page[page.index("<svg"):page.index("</svg>")]
    assert 'class="wf-node st-dead-lettered"' in svg and 'class="wf-node st-cancelled"' in svg
    assert wf["status"] == "FAILED" and wf["steps"][1]["cancel_reason"] in page
    assert ">Cancel workflow</button>" not in page and 'id="live-script"' not in page  # nothing left to follow


def test_an_operator_stops_what_a_failed_workflows_other_branch_has_left(login: Callable[[str], Client],
                                                                          live_engine: Engine) -> None:
    # One member fails at once (queue wf); the other branch waits on wf-b, which no worker serves.
    wid = live_engine.workflows.submit({"group": [
        {"type": "dtq.fail", "payload": {"message": "boom"}, "max_attempts": 1, "queue": "wf"},
        {"chain": [{"type": "dtq.echo", "queue": "wf-b"}, {"type": "dtq.echo", "queue": "wf-b"}]}]})
    deadline = time.monotonic() + 20
    while live_engine.workflows.get(wid)["status"] == "RUNNING":
        assert time.monotonic() < deadline
        run_burst(live_engine, queues=["wf"])
    operator = login("operator")
    assert ">Cancel workflow</button>" in operator.get(f"/workflows/{wid}/").content.decode()
    response = operator.post(f"/workflows/{wid}/cancel", follow=True)
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"Cancelled what was left of failed workflow {wid}: its steps not finished are CANCELLED."]
    wf = live_engine.workflows.get(wid)
    assert wf["status"] == "FAILED" and [s["status"] for s in wf["steps"]] == ["DEAD_LETTERED", "CANCELLED",
                                                                              "CANCELLED"]
    assert ">Cancel workflow</button>" not in response.content.decode()


def test_a_workflow_too_big_to_draw_is_listed(client: Client, live_engine: Engine) -> None:
    wid = live_engine.workflows.submit({"group": [{"type": "dtq.echo", "payload": i} for i in range(250)]})
    page = client.get(f"/workflows/{wid}/").content.decode()
    assert "<svg" not in page and "250 steps are more than the graph draws" in page
    assert page.count("<tr data-step=") == 250


def test_a_chain_of_two_wide_groups_renders_its_first_steps_in_well_under_a_second(
        client: Client, live_engine: Engine, dtq_settings: Any) -> None:
    # Every step of the second group waits for all 4,500 of the first (its definition holds 4,500
    # indexes, and each of the first group's holds its 4,500 successors): resolving every step
    # took ~8.5 s (20 million depends_on entries); the page resolves the 500 it lists.
    dtq_settings.DTQ = {**dtq_settings.DTQ, "REDIS_TIMEOUT_S": 60}  # the submit writes ~200 MB of definitions
    from dtq_core.conf import get_engine

    n = 4500
    wid = get_engine().workflows.submit({"chain": [{"group": [{"type": "dtq.echo", "payload": {}} for _ in range(n)]},
                                                   {"group": [{"type": "dtq.echo", "payload": {}} for _ in range(n)]}]})
    client.get(f"/workflows/{wid}/")  # warm: the first request of a test process imports and compiles
    start = time.monotonic()
    response = client.get(f"/workflows/{wid}/")
    took = time.monotonic() - start
    page = response.content.decode()
    assert response.status_code == 200 and took < 1.0, f"the workflow page took {took:.2f} s"
    assert page.count("<tr data-step=") == 500 and "<svg" not in page
    assert "and 8,500 more steps" in page and "0 of 9,000 steps finished (0%)" in page


def test_an_operator_cancels_a_workflow_and_it_is_audited(login: Callable[[str], Client],
                                                          live_engine: Engine) -> None:
    wid = live_engine.workflows.submit(TREE)
    operator = login("operator")
    assert ">Cancel workflow</button>" in operator.get(f"/workflows/{wid}/").content.decode()
    response = operator.post(f"/workflows/{wid}/cancel", follow=True)
    assert response.status_code == 200
    assert [str(m) for m in get_messages(response.wsgi_request)] == [
        f"Cancelled workflow {wid}: 5 steps, those not finished are CANCELLED."]
    assert live_engine.workflows.get(wid)["status"] == "CANCELLED"
    entry = next(e for e in live_engine.audit.list(limit=50).items if e["action"] == "workflow.cancel")
    assert entry["actor"] == "user:operator" and entry["source"] == "console"
    again = operator.post(f"/workflows/{wid}/cancel", follow=True)
    assert "already CANCELLED" in again.content.decode()


def test_without_the_permission_a_forged_cancel_is_refused(login: Callable[[str], Client],
                                                           live_engine: Engine) -> None:
    wid = live_engine.workflows.submit(TREE)
    for user in ("readonly_staff", "viewer", "nonstaff_with_perms"):
        response = login(user).post(f"/workflows/{wid}/cancel")
        assert response.status_code in (302, 403), (user, response.status_code)
    assert live_engine.workflows.get(wid)["status"] == "RUNNING"
    assert not [e for e in live_engine.audit.list(limit=50).items if e["action"] == "workflow.cancel"]
    assert Client().get(f"/workflows/{wid}/cancel").status_code == 405


def test_unknown_workflows_are_404_pages(client: Client, live_engine: Engine) -> None:
    for path in ("/workflows/nope/", "/workflows/ab12-w" + "0" * 31 + "/"):
        response = client.get(path)
        assert response.status_code == 404 and b"Not found" in response.content


def test_redis_down_is_a_503_page(client: Client, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    assert client.get("/workflows/").status_code == 503
