"""The queue page shows its limits with their usage; staff with change_queue_limits change or clear
them with a form (POST, CSRF, audited, a message); nobody else changes anything."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.messages import get_messages
from django.test import Client

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from .conftest import make_user

FORM = {"concurrency": "2", "rate_limit": "5", "rate_period_s": "1", "group_concurrency": "",
        "group_rate_limit": "10", "group_rate_period_s": "60"}


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def limits_of(engine: Engine) -> tuple[Any, ...]:
    shown = engine.limits.get("work")
    return shown["concurrency"], shown["rate"], shown["group_concurrency"], shown["group_rate"]


def test_the_queue_page_shows_the_limits_and_their_usage(live_engine: Engine, login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    live_engine.limits.set("work", {"concurrency": 3, "rate": {"limit": 5, "period_s": 0.5}}, actor=Actor.cli())
    html = login("viewer").get("/queues/work/").content.decode()
    section = html[html.index('id="limits"'):html.index("</section>", html.index('id="limits"'))]
    assert "0 running of 3" in section and "5 per 0.5 s" in section and "0 started in the window" in section
    # The depth limit every queue has (DTQ_MAX_QUEUE_DEPTH), with what this queue holds.
    depth = section.split('data-limit="depth"', 1)[1].split("</tr>", 1)[0]
    assert "100,000" in depth and "1 held" in depth
    assert "Throttled" in section and "an operator" in section
    assert 'id="limits-form"' not in section  # read-only: no form
    form_html = login("operator").get("/queues/work/").content.decode()
    assert 'id="limits-form"' in form_html and 'name="concurrency" min="1" max="100000" step="1" value="3"' in form_html
    assert 'name="rate_period_s"' in form_html and 'value="0.5"' in form_html


@pytest.mark.parametrize("who", ["admin", "operator"])
def test_staff_with_the_permission_set_and_clear_them_audited_with_a_message(
        who: str, live_engine: Engine, login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    client = login(who)
    response = client.post("/queues/work/limits", FORM, HTTP_X_REQUEST_ID="req-7")
    assert response.status_code == 302 and response["Location"] == "/queues/work/"
    assert limits_of(live_engine) == (2, {"limit": 5, "period_s": 1.0}, None, {"limit": 10, "period_s": 60.0})
    assert any("Set the limits of queue work: concurrency 2, rate 5 per 1 s, group rate 10 per 60 s" in m
               for m in _messages(response)), _messages(response)
    response = client.post("/queues/work/limits", {**FORM, "clear": "yes"})
    assert limits_of(live_engine) == (None, None, None, None)
    assert any("Cleared the limits of queue work" in m for m in _messages(response))
    entries = live_engine.audit.list().items
    assert [(e["action"], e["target"], e["actor"], e["source"]) for e in entries] == \
        [("queue.limits", "queue:work", f"user:{who}", "console")] * 2
    assert entries[1]["request_id"] == "req-7"


@pytest.mark.parametrize("who", [None, "viewer", "readonly_staff", "nonstaff_with_perms"])
def test_everyone_else_changes_nothing_and_is_not_audited(who: str | None, live_engine: Engine,
                                                          login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    client = login(who) if who else Client()
    for data in (FORM, {"clear": "yes"}):
        response = client.post("/queues/work/limits", data)
        if who is None:
            assert response.status_code == 302 and response["Location"].startswith("/login/?next=")
        else:
            assert response.status_code == 403 and b"Permission denied" in response.content
    assert limits_of(live_engine) == (None, None, None, None) and live_engine.audit.list().items == []


def test_another_queue_permission_does_not_allow_it(live_engine: Engine, db: Any) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    client = Client()
    client.force_login(make_user("pauser", staff=True, perms=("pause_queue",)))
    assert client.post("/queues/work/limits", FORM).status_code == 403
    assert 'id="limits-form"' not in client.get("/queues/work/").content.decode()
    assert limits_of(live_engine) == (None, None, None, None)


def test_get_is_405_and_a_post_without_csrf_is_refused(live_engine: Engine, users: Any,
                                                        login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    response = login("admin").get("/queues/work/limits", FORM)
    assert response.status_code == 405 and b"Nothing was changed" in response.content
    client = Client(enforce_csrf_checks=True)
    client.force_login(users["admin"])
    assert client.post("/queues/work/limits", FORM).status_code == 403
    assert limits_of(live_engine) == (None, None, None, None)


@pytest.mark.parametrize(("data", "error"), [
    ({"concurrency": "0"}, "concurrency: Ensure this value is greater than or equal to 1"),
    ({"concurrency": "100001"}, "concurrency: Ensure this value is less than or equal to 100000"),
    ({"concurrency": "two"}, "concurrency: Enter a whole number"),
    ({"concurrency": "9" * 5000}, "concurrency"),
    ({"rate_limit": "5"}, "rate: give both the starts and the period, or neither"),
    ({"group_rate_period_s": "60"}, "group rate: give both"),
    ({"rate_limit": "5", "rate_period_s": "0"}, "rate_period_s: Ensure this value is greater than or equal to 0.001"),
    ({"rate_limit": "5", "rate_period_s": "nan"}, "rate_period_s"),
    ({"rate_limit": "5", "rate_period_s": "1e400"}, "rate_period_s"),
])
def test_malformed_or_oversized_input_changes_nothing(data: dict[str, str], error: str, live_engine: Engine,
                                                      login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    live_engine.limits.set("work", {"concurrency": 4}, actor=Actor.cli())
    response = login("operator").post("/queues/work/limits", data)
    assert response.status_code == 302
    assert any(error in m and "Nothing was changed" in m for m in _messages(response)), _messages(response)
    assert limits_of(live_engine) == (4, None, None, None) and len(live_engine.audit.list().items) == 1


def test_an_unknown_queue_says_so_and_creates_nothing(live_engine: Engine, login: Callable[[str], Client]) -> None:
    response = login("operator").post("/queues/ghost/limits", FORM)
    assert any("not found" in m for m in _messages(response))
    assert live_engine.queues.names() == [] and live_engine.audit.list().items == []


def test_with_redis_down_the_page_and_the_action_are_503(login: Callable[[str], Client]) -> None:
    client = login("operator")
    for response in (client.get("/queues/work/"), client.post("/queues/work/limits", FORM)):
        assert response.status_code == 503 and b"Redis is unavailable" in response.content


def test_a_handlers_pause_of_the_queue_is_shown_while_it_lasts(live_engine: Engine,
                                                                login: Callable[[str], Client]) -> None:
    live_engine.tasks.enqueue("t.x", queue="work")
    [tag] = live_engine.registry.ensure("work").tags
    until = live_engine.clock.now_ms() + 600_000
    # What a worker does for a handler's RateLimited(scope="queue") (worker/store.py pause_partitions).
    live_engine.scripts("pauseLimits", keys=[live_engine.keys.partition(tag)], args=[until])
    shown = live_engine.limits.get("work")["paused_until"]
    assert shown is not None
    html = login("viewer").get("/queues/work/").content.decode()
    assert "A handler paused this queue (RateLimited)" in html and shown in html


def test_the_page_says_when_the_settings_set_them_and_when_partitions_split_them(
        settings: Any, live_engine: Engine, login: Callable[[str], Client]) -> None:
    from dtq_core.conf import get_engine

    settings.DTQ = {**settings.DTQ, "QUEUE_PARTITIONS": "work=2"}
    engine = get_engine()
    engine.tasks.enqueue("t.x", queue="work")
    engine.limits.sync_declared({"work": {"concurrency": 4}})
    html = login("viewer").get("/queues/work/").content.decode()
    section = html[html.index('id="limits"'):html.index("</section>", html.index('id="limits"'))]
    assert "DTQ_QUEUE_LIMITS" in section and "split over 2 partitions" in section and "0 running of 4" in section
