"""Console actions: POST + CSRF only, staff with the named permission, one audit entry, a message."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from .conftest import make_user


@dataclass(frozen=True)
class Case:
    """One console action: how to set it up, call it and tell whether it changed anything."""

    name: str
    permission: str
    setup: Callable[[Engine, Callable[..., list[str]]], dict[str, Any]]
    url: Callable[[dict[str, Any]], str]
    data: Callable[[dict[str, Any]], dict[str, Any]]
    changed: Callable[[Engine, dict[str, Any]], bool]
    message: str


def _queue(engine: Engine, _: Any) -> dict[str, Any]:
    return {"task": engine.tasks.enqueue("t.x", queue="work").id}


def _paused_queue(engine: Engine, make: Any) -> dict[str, Any]:
    state = _queue(engine, make)
    engine.queues.pause("work", Actor.user("setup", source="console"))
    return state


def _empty_queue(engine: Engine, make: Any) -> dict[str, Any]:
    engine.tasks.cancel(engine.tasks.enqueue("t.x", queue="work").id, Actor.cli())
    return {}


def _dead(engine: Engine, make: Callable[..., list[str]]) -> dict[str, Any]:
    return {"ids": make(2, message="flaky upstream")}


def _dlq_len(engine: Engine) -> int:
    return engine.dlq.count()


CASES = [
    Case("pause", "pause_queue", _queue, lambda s: "/queues/work/pause", lambda s: {},
         lambda e, s: e.queues.get("work")["paused"], "Paused queue work"),
    Case("resume", "pause_queue", _paused_queue, lambda s: "/queues/work/resume", lambda s: {},
         lambda e, s: not e.queues.get("work")["paused"], "Resumed queue work"),
    Case("purge", "purge_queue", _queue, lambda s: "/queues/work/purge", lambda s: {"confirm": "yes"},
         lambda e, s: e.tasks.get(s["task"])["status"] == "CANCELLED", "cancelled 1 waiting task"),
    Case("delete-queue", "purge_queue", _empty_queue, lambda s: "/queues/work/delete", lambda s: {},
         lambda e, s: not e.client.hexists(e.keys.queues(), "work"), "Deleted queue work"),
    Case("cancel", "cancel_task", _queue, lambda s: f"/tasks/{s['task']}/cancel", lambda s: {},
         lambda e, s: e.tasks.get(s["task"])["status"] == "CANCELLED", "Cancelled task"),
    Case("dlq-retry", "retry_deadletter", _dead, lambda s: "/dlq/retry", lambda s: {"ids": s["ids"]},
         lambda e, s: _dlq_len(e) == 0, "Retried 2 of 2 selected dead letters"),
    Case("dlq-discard", "discard_deadletter", _dead, lambda s: "/dlq/discard", lambda s: {"ids": s["ids"][:1]},
         lambda e, s: _dlq_len(e) == 1, "Discarded 1 of 1 selected dead letter"),
    Case("dlq-retry-matching", "retry_deadletter", _dead, lambda s: "/dlq/matching/retry",
         lambda s: {"q": "flaky", "confirm": "yes"}, lambda e, s: _dlq_len(e) == 0,
         "Retried 2 dead letters matching q=flaky"),
    Case("dlq-discard-matching", "discard_deadletter", _dead, lambda s: "/dlq/matching/discard",
         lambda s: {"confirm": "yes"}, lambda e, s: _dlq_len(e) == 0,
         "Discarded 2 dead letters matching everything in the DLQ"),
]
IDS = [c.name for c in CASES]


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("who", ["admin", "operator"])
def test_staff_with_the_permission_act_once_audited_with_a_message(
        case: Case, who: str, live_engine: Engine, dead_letters: Any, login: Callable[[str], Client]) -> None:
    state = case.setup(live_engine, dead_letters)
    audit_before = len(live_engine.audit.list(limit=500).items)
    client = login(who)
    response = client.post(case.url(state), {**case.data(state), "next": "/dlq/"}, HTTP_X_REQUEST_ID="req-42")
    assert response.status_code == 302 and response["Location"].startswith("/"), response.content[:300]
    assert case.changed(live_engine, state)
    assert any(case.message in m for m in _messages(response)), _messages(response)
    entries = live_engine.audit.list(limit=500).items
    assert len(entries) == audit_before + 1
    assert entries[0]["actor"] == f"user:{who}" and entries[0]["source"] == "console"
    assert entries[0]["request_id"] == "req-42"


@pytest.mark.parametrize("case", CASES, ids=IDS)
@pytest.mark.parametrize("who", [None, "viewer", "readonly_staff", "nonstaff_with_perms"])
def test_everyone_else_changes_nothing_and_is_not_audited(
        case: Case, who: str | None, live_engine: Engine, dead_letters: Any, login: Callable[[str], Client]) -> None:
    state = case.setup(live_engine, dead_letters)
    audit_before = live_engine.audit.list(limit=500).items
    client = login(who) if who else Client()
    response = client.post(case.url(state), case.data(state))
    if who is None:
        assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
    else:
        assert response.status_code == 403 and b"Permission denied" in response.content
    assert not case.changed(live_engine, state)
    assert live_engine.audit.list(limit=500).items == audit_before


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_get_on_an_action_url_is_405(case: Case, live_engine: Engine, dead_letters: Any,
                                     login: Callable[[str], Client]) -> None:
    state = case.setup(live_engine, dead_letters)
    response = login("admin").get(case.url(state), case.data(state))
    # A console page saying what happened (the browser showed its own blank error page before).
    assert response.status_code == 405 and response["Allow"] == "POST"
    assert b"Nothing was changed" in response.content and b"<html" in response.content
    assert not case.changed(live_engine, state)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_a_post_without_csrf_token_is_refused(case: Case, live_engine: Engine, dead_letters: Any,
                                              users: Any) -> None:
    state = case.setup(live_engine, dead_letters)
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["admin"])
    assert client.post(case.url(state), case.data(state)).status_code == 403
    assert not case.changed(live_engine, state)


def test_each_permission_only_allows_its_own_action(live_engine: Engine, dead_letters: Any, db: Any) -> None:
    ids = dead_letters(1)
    client = Client()
    client.force_login(make_user("retrier", staff=True, perms=("retry_deadletter",)))
    assert client.post("/dlq/discard", {"ids": ids}).status_code == 403
    assert client.post("/queues/default/pause").status_code == 403
    assert client.post("/dlq/retry", {"ids": ids}).status_code == 302
    assert live_engine.dlq.count() == 0
    html = client.get("/dlq/").content.decode()
    assert "Retry all matching" in html and "Discard all matching" not in html


def test_matching_actions_without_confirmation_go_to_the_preview(live_engine: Engine, dead_letters: Any,
                                                                  login: Callable[[str], Client]) -> None:
    dead_letters(2, message="flaky upstream")
    client = login("operator")
    response = client.post("/dlq/matching/discard", {"q": "flaky"})
    assert response.status_code == 302 and response["Location"] == "/dlq/matching/confirm?action=discard&q=flaky"
    assert live_engine.dlq.count() == 2 and live_engine.audit.list().items == []
    preview = client.get(response["Location"])
    assert b"Discard 2 dead letters" in preview.content
    response = client.post("/queues/default/purge")
    assert response["Location"] == "/queues/default/purge/confirm"


@pytest.mark.parametrize("data,error", [
    ({}, "select at least one dead letter"),
    ({"ids": ["not-an-id"]}, "not a dead-letter entry id"),
    ({"ids": [f"{i}-0" for i in range(501)]}, "at most 500"),
    ({"ids": ["1-0" * 100]}, "not a dead-letter entry id"),
])
def test_malformed_or_oversized_selections_change_nothing(data: dict[str, Any], error: str, live_engine: Engine,
                                                          dead_letters: Any, login: Callable[[str], Client]) -> None:
    dead_letters(1)
    response = login("operator").post("/dlq/retry", data)
    assert response.status_code == 302
    assert any(error in m for m in _messages(response)), _messages(response)
    assert live_engine.dlq.count() == 1 and live_engine.audit.list().items == []


def test_a_post_with_too_many_fields_is_a_400(live_engine: Engine, dead_letters: Any,
                                              login: Callable[[str], Client]) -> None:
    dead_letters(1)
    response = login("operator").post("/dlq/retry", {"ids": [f"{i}-0" for i in range(5000)]})
    assert response.status_code == 400  # Django's DATA_UPLOAD_MAX_NUMBER_FIELDS guard
    assert live_engine.dlq.count() == 1 and live_engine.audit.list().items == []


def test_bad_filters_on_matching_actions_change_nothing(live_engine: Engine, dead_letters: Any,
                                                        login: Callable[[str], Client]) -> None:
    dead_letters(1)
    response = login("operator").post("/dlq/matching/retry", {"queue": "Bad Queue!", "confirm": "yes"})
    assert any("queue" in m for m in _messages(response))
    response = login("operator").post("/dlq/matching/retry", {"q": "x" * 500, "confirm": "yes"})
    assert any("at most 200" in m for m in _messages(response))
    assert live_engine.dlq.count() == 1 and live_engine.audit.list().items == []


def test_retrying_entries_already_gone_says_so(live_engine: Engine, dead_letters: Any,
                                               login: Callable[[str], Client]) -> None:
    ids = dead_letters(1)
    response = login("operator").post("/dlq/retry", {"ids": [*ids, "abc-1-0"]})  # a well-formed id, gone
    assert any("Retried 1 of 2 selected dead letters (1 already gone)." in m for m in _messages(response))


def test_retrying_entries_whose_task_expired_says_they_stay_and_how_to_remove_them(
        live_engine: Engine, dead_letters: Any, login: Callable[[str], Client]) -> None:
    ids = dead_letters(3)
    expired = [e for e in live_engine.dlq.list().items if e["entry_id"] == ids[0]][0]["task_id"]
    live_engine.client.delete(live_engine.keys.task(expired))  # its retention ran out
    operator = login("operator")
    response = operator.post("/dlq/retry", {"ids": ids[:2]})
    assert any(m == "Retried 1 of 2 selected dead letters. 1 stays in the DLQ: its task record expired, so only "
                    "discarding removes it." for m in _messages(response)), _messages(response)
    response = operator.post("/dlq/matching/retry", {"confirm": "yes"})
    assert any(m.startswith("Retried 1 dead letter matching everything in the DLQ. 1 stays in the DLQ")
               for m in _messages(response)), _messages(response)
    assert [e["entry_id"] for e in live_engine.dlq.list().items] == [ids[0]]


def test_domain_errors_become_messages(live_engine: Engine, login: Callable[[str], Client]) -> None:
    task_id = live_engine.tasks.enqueue("t.x").id
    live_engine.tasks.cancel(task_id, Actor.cli())
    client = login("operator")
    response = client.post(f"/tasks/{task_id}/cancel")
    assert response.status_code == 302 and any("already CANCELLED" in m for m in _messages(response))
    response = client.post("/queues/nope/resume")
    assert any("not found" in m for m in _messages(response))
    assert client.post("/tasks/missing/cancel").status_code == 302


def test_deleting_a_busy_queue_says_why_and_changes_nothing(live_engine: Engine,
                                                           login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    client = login("operator")
    page = client.get("/queues/work/").content.decode()
    # A real button in a POST form with the CSRF token, on the queue's page.
    form = page[page.index('action="/queues/work/delete"') - 30:]
    form = form[:form.index("</form>")]
    assert 'method="post"' in form and "csrfmiddlewaretoken" in form and ">Delete</button>" in form
    response = client.post("/queues/work/delete", follow=True)
    assert "is not empty: 1 waiting" in response.content.decode()
    assert live_engine.queues.get("work")["waiting"] == 1
    assert [e["action"] for e in live_engine.audit.list().items] == []


def test_pausing_twice_reports_no_change(live_engine: Engine, login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    client = login("operator")
    client.post("/queues/work/pause")
    response = client.post("/queues/work/pause")
    assert any("already paused (0 queues changed)" in m for m in _messages(response))


def test_next_only_redirects_locally(live_engine: Engine, login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    client = login("operator")
    assert client.post("/queues/work/pause", {"next": "https://evil.example/"})["Location"] == "/queues/work/"
    assert client.post("/queues/work/resume", {"next": "/queues/work/?x=1"})["Location"] == "/queues/work/?x=1"


def test_an_action_with_redis_down_is_a_503_page(login: Callable[[str], Client]) -> None:
    started = time.monotonic()
    response = login("operator").post("/queues/work/pause")
    assert response.status_code == 503 and b"Redis is unavailable" in response.content
    assert time.monotonic() - started < 2


def test_buttons_are_shown_only_to_those_who_may_press_them(live_engine: Engine, dead_letters: Any,
                                                            login: Callable[[str], Client]) -> None:
    dead_letters(1)
    for who, visible in (("admin", True), ("operator", True), ("readonly_staff", False), ("viewer", False)):
        html = login(who).get("/dlq/").content.decode() + login(who).get("/queues/default/").content.decode()
        for label in (">Retry<", ">Discard<", ">Pause<", ">Purge…<", ">Delete<"):
            assert (label in html) is visible, (who, label)
