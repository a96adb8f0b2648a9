"""The console's /periodic/ pages and actions: rendered for readers, pause/resume/trigger/delete as
POST + CSRF by staff with the periodic permissions (audited, a message), a confirmation before a
delete, 404 and 503 pages, and the task page naming the schedule that fired it."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec

from .conftest import make_user

HOSTILE = '<script>alert("x")</script>'


@pytest.fixture
def nightly(live_engine: Engine) -> dict[str, Any]:
    return live_engine.periodic.create(PeriodicSpec(
        name="report.nightly", type="dtq.echo", payload={"html": HOSTILE}, cron="0 3 * * *", timezone="Europe/Berlin",
        queue="reports"), actor=Actor.cli())


@pytest.fixture
def periodic_operator(db: Any) -> Client:
    client = Client()
    client.force_login(make_user("periodic_op", staff=True, perms=("operate_periodic", "change_periodic")))
    return client


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _audited(engine: Engine) -> list[dict[str, Any]]:
    return engine.audit.list(limit=500).items


def test_the_pages_render_for_readers_and_escape_what_they_show(client: Client, live_engine: Engine,
                                                                nightly: dict[str, Any]) -> None:
    listing = client.get("/periodic/").content.decode()
    assert "report.nightly" in listing and nightly["description"] in listing and "0 3 * * *" in listing
    assert 'href="/periodic/"' in listing and ">Periodic</a>" in listing  # in the navigation
    detail = client.get("/periodic/report.nightly/")
    assert detail.status_code == 200
    text = detail.content.decode()
    assert "Europe/Berlin" in text and "It has not fired yet" in text and HOSTILE not in text
    assert "/tasks/?periodic_name=report.nightly" in text
    assert client.get("/periodic/report.nightly/delete/confirm").status_code == 200
    # Nothing to press for a reader.
    assert ">Pause</button>" not in listing and ">Trigger now</button>" not in listing


def test_an_empty_list_says_how_to_make_one(client: Client, live_engine: Engine) -> None:
    assert b"No periodic tasks" in client.get("/periodic/").content


@pytest.mark.parametrize("path", ["/periodic/nope/", "/periodic/nope/delete/confirm", "/periodic/" + "x" * 300 + "/"])
def test_unknown_names_are_404_pages(client: Client, live_engine: Engine, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404 and b"Not found" in response.content


def test_pause_resume_trigger_delete_through_the_console_are_audited_by_name(
        live_engine: Engine, nightly: dict[str, Any], periodic_operator: Client) -> None:
    client = periodic_operator
    response = client.post("/periodic/report.nightly/pause", {"next": "/periodic/"}, HTTP_X_REQUEST_ID="req-p")
    assert response.status_code == 302 and response["Location"] == "/periodic/"
    assert any("Paused periodic task report.nightly" in m for m in _messages(response))
    assert live_engine.periodic.get("report.nightly")["paused"] is True
    page = client.get("/periodic/").content.decode()
    assert ">Resume</button>" in page and "PAUSED" in page

    response = client.post("/periodic/report.nightly/resume")
    assert response["Location"] == "/periodic/report.nightly/"
    assert any("skips the ticks missed" in m for m in _messages(response))
    assert live_engine.periodic.get("report.nightly")["paused"] is False

    response = client.post("/periodic/report.nightly/trigger")
    [message] = [m for m in _messages(response) if "Triggered" in m]
    task_id = message.split("task ")[2].split(" ")[0]
    task = live_engine.tasks.get(task_id)
    assert task["periodic_name"] == "report.nightly" and task["queue"] == "reports"
    task_page = client.get(f"/tasks/{task_id}/").content.decode()
    assert 'href="/periodic/report.nightly/"' in task_page and "tick" in task_page

    response = client.post("/periodic/report.nightly/delete")  # no confirmation yet: the page asks
    assert response["Location"] == "/periodic/report.nightly/delete/confirm"
    assert live_engine.periodic.list() != []
    response = client.post("/periodic/report.nightly/delete", {"confirm": "yes"})
    assert response["Location"] == "/periodic/" and live_engine.periodic.list() == []

    entries = _audited(live_engine)[:4]
    assert {(e["actor"], e["source"]) for e in entries} == {("user:periodic_op", "console")}
    assert all("report.nightly" in e["target"] for e in entries)
    assert entries[-1]["request_id"] == "req-p"


@pytest.mark.parametrize("path,data", [("/periodic/report.nightly/pause", {}),
                                       ("/periodic/report.nightly/trigger", {}),
                                       ("/periodic/report.nightly/delete", {"confirm": "yes"})])
@pytest.mark.parametrize("who", [None, "viewer", "readonly_staff", "nonstaff_with_perms", "queue_operator"])
def test_everyone_else_changes_nothing_and_is_not_audited(live_engine: Engine, nightly: dict[str, Any], db: Any,
                                                          path: str, data: dict[str, str], who: str | None) -> None:
    users = {"viewer": {}, "readonly_staff": {"staff": True},
             "nonstaff_with_perms": {"perms": ("operate_periodic", "change_periodic")},
             "queue_operator": {"staff": True, "perms": ("pause_queue", "purge_queue", "cancel_task")}}
    client = Client()
    if who is not None:
        client.force_login(make_user(who, **users[who]))  # type: ignore[arg-type]
    before = _audited(live_engine)
    response = client.post(path, data)
    if who is None:
        assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    else:
        assert response.status_code == 403 and b"Permission denied" in response.content
    assert live_engine.periodic.get("report.nightly") == nightly
    assert _audited(live_engine) == before


def test_operating_does_not_allow_deleting(live_engine: Engine, nightly: dict[str, Any], db: Any) -> None:
    client = Client()
    client.force_login(make_user("operator_only", staff=True, perms=("operate_periodic",)))
    assert client.post("/periodic/report.nightly/pause").status_code == 302
    assert client.post("/periodic/report.nightly/delete", {"confirm": "yes"}).status_code == 403
    page = client.get("/periodic/").content.decode()
    assert ">Resume</button>" in page and "Delete…" not in page
    assert [p["name"] for p in live_engine.periodic.list()] == ["report.nightly"]


def test_actions_are_post_only_with_csrf(live_engine: Engine, nightly: dict[str, Any], db: Any) -> None:
    admin = make_user("root", superuser=True)
    client = Client()
    client.force_login(admin)
    response = client.get("/periodic/report.nightly/pause")
    assert response.status_code == 405 and response["Allow"] == "POST"
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin)
    assert strict.post("/periodic/report.nightly/trigger").status_code == 403
    assert live_engine.periodic.get("report.nightly")["last_runs"] == nightly["last_runs"]
    assert [e["action"] for e in _audited(live_engine)] == ["periodic.create"]  # the fixture's only


def test_an_unknown_name_is_a_message_not_a_change(live_engine: Engine, periodic_operator: Client) -> None:
    response = periodic_operator.post("/periodic/ghost/trigger")
    assert response.status_code == 302 and any("not found" in m for m in _messages(response))
    assert _audited(live_engine) == []


def test_redis_down_gives_503_pages_fast(periodic_operator: Client) -> None:
    for call in (lambda: Client().get("/periodic/"), lambda: Client().get("/periodic/x/"),
                 lambda: periodic_operator.post("/periodic/x/pause"),
                 lambda: periodic_operator.post("/periodic/x/delete", {"confirm": "yes"})):
        started = time.monotonic()
        response = call()
        assert response.status_code == 503 and b"Redis is unavailable" in response.content
        assert time.monotonic() - started < 2


def test_the_tasks_page_filters_by_periodic_name(client: Client, live_engine: Engine,
                                                 nightly: dict[str, Any]) -> None:
    fired = live_engine.periodic.trigger("report.nightly", actor=Actor.cli())["task_id"]
    other = live_engine.tasks.enqueue("dtq.echo", queue="reports").id
    page = client.get("/tasks/", {"periodic_name": "report.nightly"}).content.decode()
    assert fired[:10] in page and other[:10] not in page
    assert client.get("/tasks/", {"periodic_name": "x" * 300}).status_code == 400


