"""Console pages with Django's test client: content, read policy, paging, bad input, Redis down."""

from __future__ import annotations

import html
import json
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from django.test import Client

from dtq_core.engine import Engine
from dtq_dashboard.timeline import task_timeline
from dtq_dashboard.views import PRETTY_MAX_CHARS, _pretty
from tests.api.support import serve_types
from tests.redis_server import RedisServer

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'


@pytest.fixture
def seeded(live_engine: Engine, dead_letters: Callable[..., list[str]]) -> dict[str, Any]:
    dlq_ids = dead_letters(2, message=f"bad card {HOSTILE}")
    serve_types(live_engine, "emails.send", "reports.build", "x.y")  # as the app's workers would
    waiting = [live_engine.tasks.enqueue("emails.send", {"to": f"u{i}@example.com", "html": HOSTILE}, queue="emails").id
               for i in range(3)]
    delayed = live_engine.tasks.enqueue("reports.build", {"month": 1}, queue="reports", delay_seconds=600).id
    return {"dlq_ids": dlq_ids, "dead_task": live_engine.dlq.get(dlq_ids[0])["task_id"], "waiting": waiting,
            "delayed": delayed}


def pages(seeded: dict[str, Any]) -> list[str]:
    return ["/", "/console/state.json", "/queues/emails/", "/queues/emails/purge/confirm", "/tasks/",
            "/tasks/?queue=emails&status=QUEUED", f"/tasks/{seeded['waiting'][0]}/", f"/tasks/{seeded['dead_task']}/",
            "/dlq/", "/dlq/?queue=default&type=dtq.fail&q=card", "/dlq/matching/confirm?action=retry&q=card",
            "/dlq/matching/confirm?action=discard", "/schedule/", "/workers/", "/audit/?source=console"]


def test_every_page_renders_for_anonymous_readers_by_default(client: Client, seeded: dict[str, Any]) -> None:
    for path in pages(seeded):
        response = client.get(path)
        assert response.status_code == 200, (path, response.content[:500])


def test_lost_workers_are_shown_lost_with_unknown_details_not_made_up_ones(
        client: Client, live_engine: Engine, redis_client: Any) -> None:
    old = int(live_engine.clock.now_ms() - (live_engine.config.visibility_timeout_s + 5) * 1000)
    redis_client.zadd(live_engine.keys.workers(), {"w-gone": old})  # its details hash expired
    for path in ("/", "/workers/"):
        html = client.get(path).content.decode()
        row = html[html.index("<code>w-gone</code>"):]
        row = row[:row.index("</tr>")]
        assert "lost" in row and "all" not in row and "running" not in row, (path, row)


def test_login_required_makes_every_page_ask_for_login(client: Client, seeded: dict[str, Any], settings: Any,
                                                       login: Callable[[str], Client]) -> None:
    settings.DTQ_CONSOLE_LOGIN_REQUIRED = True
    for path in pages(seeded):
        response = client.get(path)
        if path.endswith(".json"):
            assert response.status_code == 403
        else:
            assert response.status_code == 302 and response["Location"].startswith("/login/?next="), path
    viewer = login("viewer")  # any logged-in user may read; acting is another matter
    for path in pages(seeded):
        assert viewer.get(path).status_code == 200, path


def test_the_overview_shows_depth_per_priority_dlq_paused_and_the_leader(
        client: Client, live_engine: Engine, seeded: dict[str, Any]) -> None:
    live_engine.tasks.enqueue("x.y", queue="emails", priority="high")
    live_engine.client.set(live_engine.keys.leader(), "worker-7")
    from dtq_core.engine.audit import Actor

    live_engine.queues.pause("reports", Actor.user("ops", source="console"))
    html = client.get("/").content.decode()
    assert 'data-queue="emails"' in html and 'data-f="high">1<' in html and 'data-f="normal">3<' in html
    assert 'data-total="dlq">2<' in html and "PAUSED" in html and "worker-7" in html
    state = client.get("/console/state.json").json()
    emails = next(q for q in state["queues"] if q["name"] == "emails")
    assert emails["depth"] == {"high": 1, "normal": 3, "low": 0} and state["dlq_total"] == 2
    assert state["leader"] == "worker-7"


def test_hostile_payloads_and_errors_are_escaped(client: Client, seeded: dict[str, Any]) -> None:
    for path in ("/queues/emails/", f"/tasks/{seeded['waiting'][0]}/", "/dlq/", f"/tasks/{seeded['dead_task']}/"):
        html = client.get(path).content.decode()
        assert "<script>alert" not in html and "<img src=x" not in html, path
        assert "&lt;script&gt;" in html or "&lt;img src=x" in html, path


def test_the_task_page_shows_payload_timeline_errors_and_result(client: Client, live_engine: Engine,
                                                                seeded: dict[str, Any]) -> None:
    html = client.get(f"/tasks/{seeded['dead_task']}/").content.decode()
    assert "DEAD_LETTERED" in html and "Attempt 1 failed" in html and "Traceback (tail)" in html
    assert "&quot;retryable&quot;: false" in html  # pretty JSON payload
    assert 'title="20' in html and " UTC" in html  # exact time on hover
    live_engine.client.set(live_engine.keys.result(seeded["waiting"][0]), '{"ok": true}')
    live_engine.client.hset(live_engine.keys.task(seeded["waiting"][0]), "result_truncated", "1")
    html = client.get(f"/tasks/{seeded['waiting'][0]}/").content.decode()
    assert "&quot;ok&quot;: true" in html and "truncated" in html


def test_waiting_tasks_are_paged_by_stream_id(client: Client, live_engine: Engine) -> None:
    for i in range(55):
        live_engine.tasks.enqueue("t.x", {"i": i}, queue="big", priority="low" if i % 2 else "high")
    first = client.get("/queues/big/")
    assert first.context["page"].next_cursor and len(first.context["page"].items) == 50
    assert [t["priority"] for t in first.context["page"].items][:28] == ["high"] * 28
    second = client.get("/queues/big/", {"cursor": first.context["page"].next_cursor})
    assert len(second.context["page"].items) == 5 and second.context["page"].next_cursor is None
    seen = {t["task_id"] for t in first.context["page"].items} | {t["task_id"] for t in second.context["page"].items}
    assert len(seen) == 55
    assert "Next page" in first.content.decode() and "First page" in second.content.decode()


def test_dlq_filters_and_error_groups(client: Client, dead_letters: Callable[..., list[str]]) -> None:
    dead_letters(3, message="timeout talking to gateway")
    dead_letters(1, message="card declined", queue="billing")
    response = client.get("/dlq/")
    groups = response.context["groups"]["groups"]
    assert [(g["count"], g["message"]) for g in groups] == [(3, "timeout talking to gateway"), (1, "card declined")]
    assert len(client.get("/dlq/", {"queue": "billing"}).context["page"].items) == 1
    assert len(client.get("/dlq/", {"q": "TIMEOUT"}).context["page"].items) == 3
    preview = client.get("/dlq/matching/confirm", {"action": "retry", "q": "timeout"})
    assert preview.context["count"] == 3 and "Retry 3 dead letters" in preview.content.decode()
    assert client.get("/dlq/matching/confirm", {"action": "discard", "queue": "billing"}).context["count"] == 1
    assert client.get("/dlq/matching/confirm", {"action": "discard"}).context["count"] == 4


def test_a_group_seen_under_a_queue_filter_acts_on_that_queue_only(
        login: Callable[[str], Client], dead_letters: Callable[..., list[str]]) -> None:
    # The same error in two queues: from the billing-filtered page, Show, Retry group and Discard
    # group must stay in billing (they used to drop the queue and preview every queue's).
    dead_letters(3, message="gateway timeout")
    dead_letters(2, message="gateway timeout", queue="billing")
    admin = login("admin")
    page = admin.get("/dlq/", {"queue": "billing"}).content.decode()
    links = {label: html.unescape(href) for href, label in
             re.findall(r'<a[^>]*href="([^"]+)"[^>]*>(Show|Retry group…|Discard group…)</a>', page)}
    assert set(links) == {"Show", "Retry group…", "Discard group…"}
    assert len(admin.get("/dlq/" + links["Show"]).context["page"].items) == 2
    for label in ("Retry group…", "Discard group…"):
        preview = admin.get(links[label])
        assert preview.status_code == 200 and preview.context["count"] == 2, label


def test_the_preview_count_is_bounded_and_says_when_it_is_a_lower_bound(
        live_engine: Engine, dead_letters: Callable[..., list[str]]) -> None:
    dead_letters(3, message="timeout")
    assert live_engine.dlq.match_count(type="dtq.fail", budget=2) == {"count": 2, "exact": False}
    assert live_engine.dlq.match_count(q="timeout", budget=3) == {"count": 3, "exact": True}
    assert live_engine.dlq.match_count(queue="default") == {"count": 3, "exact": True}


def test_task_search_by_id_redirects_to_the_task(client: Client, live_engine: Engine) -> None:
    task_id = live_engine.tasks.enqueue("t.x").id
    response = client.get("/tasks/", {"id": f"  {task_id} "})
    assert response.status_code == 302 and response["Location"] == f"/tasks/{task_id}/"


@pytest.mark.parametrize("path", ["/queues/nope/", "/queues/Bad Name!/", "/tasks/missing-task/", "/tasks/a:b/",
                                  "/queues/dlq/", "/tasks/?id=a/b", "/tasks/?id=%2F"])
def test_unknown_things_are_404_pages(client: Client, live_engine: Engine, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404 and b"Not found" in response.content


@pytest.mark.parametrize("path", [
    "/queues/emails/?cursor=nonsense", "/dlq/?cursor=abc", "/schedule/?cursor=soon", "/tasks/?cursor=x1",
    "/audit/?cursor=zz", "/tasks/?status=NOPE", "/dlq/?queue=Bad%20Queue", "/dlq/?q=" + "x" * 201,
    "/tasks/?type=" + "t" * 300, "/dlq/matching/confirm?action=explode", "/audit/?source=email",
    "/queues/emails/?cursor=" + "9" * 500, "/dlq/?cursor=0-0", "/audit/?cursor=99999999999999999999-0",
    "/queues/emails/?cursor=high:18446744073709551615-18446744073709551615",
])
def test_malformed_or_oversized_input_is_a_400_page(client: Client, live_engine: Engine, path: str) -> None:
    live_engine.tasks.enqueue("t.x", queue="emails")
    response = client.get(path)
    assert response.status_code == 400, response.content[:300]
    assert b"Bad request" in response.content


def test_pages_are_get_only(client: Client, live_engine: Engine) -> None:
    assert client.post("/dlq/").status_code in (403, 405)  # CSRF or method: never a change
    assert Client().post("/workers/").status_code == 405


def test_redis_down_gives_503_pages_fast(client: Client) -> None:
    # No redis fixture here: settings point at a dead port.
    for path in ("/", "/queues/default/", f"/tasks/abc123-{'0' * 32}/", "/dlq/", "/schedule/", "/workers/", "/audit/",
                 "/tasks/"):
        started = time.monotonic()
        response = client.get(path)
        assert response.status_code == 503 and b"Redis is unavailable" in response.content, path
        assert time.monotonic() - started < 2
    assert client.get("/console/state.json").status_code == 503


def test_a_database_redis_does_not_have_gives_503_pages_saying_so(settings: Any, redis_server: RedisServer,
                                                                  login: Callable[[str], Client]) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": redis_server.url.rsplit("/", 1)[0] + "/99"}
    admin = login("admin")
    for response in (admin.get("/"), admin.get("/dlq/"), admin.post("/queues/default/pause"),
                     admin.post(f"/tasks/ab12cd-{'0' * 32}/cancel"), admin.post("/dlq/retry", {"ids": ["ab12cd-1-1"]})):
        assert response.status_code == 503, response.content[:300]
        assert b"DB index is out of range" in response.content
    state = admin.get("/console/state.json")
    assert state.status_code == 503 and "DTQ_REDIS_URL" in state.json()["error"]["message"]


def test_frozen_redis_gives_503_within_2_seconds(tmp_path: Path, settings: Any, client: Client) -> None:
    with RedisServer(tmp_path / "frozen", appendonly=False) as server:
        settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": "frozen"}
        assert client.get("/").status_code == 200
        server.pause()
        try:
            started = time.monotonic()
            assert client.get("/dlq/").status_code == 503
            assert time.monotonic() - started < 2.5
        finally:
            server.resume()


def test_login_and_logout_pages(client: Client, users: Any) -> None:
    assert b"Log in to the dtq console" in client.get("/login/").content
    response = client.post("/login/", {"username": "admin", "password": "wrong"})
    assert response.status_code == 200 and b"didn't match" in response.content
    response = client.post("/login/?next=/dlq/", {"username": "admin", "password": "correct horse battery staple",
                                                  "next": "/dlq/"})
    assert response.status_code == 302 and response["Location"] == "/dlq/"
    assert client.get("/logout/").status_code == 405  # logout is a POST
    assert client.post("/logout/").status_code == 302
    assert "_auth_user_id" not in client.session


def test_the_timeline_orders_a_start_and_a_failure_of_the_same_millisecond() -> None:
    at = "2026-11-30T04:00:00.123Z"
    rows = task_timeline({"created_at": "2026-11-30T04:00:00.000Z", "status": "RETRYING", "attempt": 2,
                          "started_at": at, "errors": [{"attempt": 2, "error": "dtq.RetryableError", "at": at},
                                                        {"attempt": 1, "error": "dtq.RetryableError",
                                                         "at": "2026-11-30T04:00:00.050Z"}]})
    assert [r["label"] for r in rows] == ["Created", "Attempt 1 failed", "Attempt 2 started", "Attempt 2 failed"]


def test_a_groups_links_select_exactly_that_group_not_the_messages_holding_its_text(
        login: Callable[[str], Client], live_engine: Engine, dead_letters: Callable[..., list[str]]) -> None:
    # "boom" is in "kaboom" (and a text filter also searches payloads): Discard group… on "boom"
    # used to preview and discard all five. A group is its type, error class and message exactly.
    dead_letters(2, message="boom")
    dead_letters(3, message="kaboom")
    dead_letters(1, message="   ")  # no message at all: the group "" (which used to fail the page)
    admin = login("admin")
    page = admin.get("/dlq/").content.decode()
    groups = re.findall(r'<td class="n" data-label="Count"><strong>(\d+)</strong></td>.*?'
                        r'<td class="err" data-label="Error"><code>[^<]*</code> ([^<]*)</td>.*?'
                        r'href="([^"]*)">Show</a>.*?href="([^"]*/dlq/matching/confirm\?action=discard[^"]*)"',
                        page, re.S)
    by_message = {message.strip(): (int(count), html.unescape(show), html.unescape(discard))
                  for count, message, show, discard in groups}
    assert {m: c for m, (c, _, _) in by_message.items()} == {"boom": 2, "kaboom": 3, "": 1}
    _, show, discard = by_message["boom"]
    assert len(admin.get("/dlq/" + show).context["page"].items) == 2
    confirm = admin.get(discard)
    assert confirm.context["count"] == 2 and confirm.context["exact"]
    assert re.search(r"<h1>(.*?)</h1>", confirm.content.decode(), re.S).group(1).strip() == "Discard 2 dead letters?"
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', confirm.content.decode()))
    done = admin.post("/dlq/matching/discard", {k: html.unescape(v) for k, v in form.items()}, follow=True)
    assert "Discarded 2 dead letters matching" in done.content.decode()
    assert sorted(g["message"] for g in live_engine.dlq.groups()["groups"]) == ["", "kaboom"]
    # The group without a message is that group, not "no filter" (everything).
    _, _, discard = by_message[""]
    assert admin.get(discard).context["count"] == 1
    form = dict(re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)">', admin.get(discard).content.decode()))
    admin.post("/dlq/matching/discard", {k: html.unescape(v) for k, v in form.items()})
    assert [(g["message"], g["count"]) for g in live_engine.dlq.groups()["groups"]] == [("kaboom", 3)]


def test_the_error_groups_say_when_more_exist_than_are_shown(client: Client,
                                                             dead_letters: Callable[..., list[str]]) -> None:
    for i in range(16):
        dead_letters(1, message=f"distinct failure {i}")
    page = client.get("/dlq/").content.decode()
    assert "The 15 largest of 16 groups" in page


def _dead_letters_in_redis(engine: Engine, kinds: list[tuple[str, int]]) -> None:
    """Dead letters written straight into queue emails' DLQ, oldest kind first (thousands, in one
    round trip)."""
    [tag] = engine.registry.ensure("emails").tags
    pipe = engine.client.pipeline(transaction=False)
    now = engine.clock.now_ms()
    for kind, n in kinds:
        for i in range(n):
            pipe.xadd(engine.keys.dlq(tag), {"task_id": f"{tag}-{i:032x}", "queue": "emails", "type": kind,
                                             "attempt": 1, "error_class": "RuntimeError", "error": f"{kind} broke",
                                             "failed_at": now})
        pipe.hincrby(engine.keys.dlq_counts(tag), "emails", n)
    pipe.execute()


def test_a_cause_buried_under_newer_dead_letters_is_neither_reported_absent_nor_counted_as_zero(
        client: Client, live_engine: Engine, login: Callable[[str], Client]) -> None:
    # 300 old dead letters of one kind under 5,500 newer ones of another: more than a page looks at.
    _dead_letters_in_redis(live_engine, [("mail.send", 300), ("dtq.fail", 5500)])
    page = client.get("/dlq/", {"type": "mail.send"})
    text = page.content.decode()
    assert page.context["page"].items == [] and "No dead letters match" not in text
    assert "older ones may" in text and "keep looking" in text
    preview = client.get("/dlq/matching/confirm", {"action": "retry", "type": "mail.send"})
    assert preview.context["count"] == 300 and preview.context["exact"]  # counted all the way back
    assert "Retry 300 dead letters" in preview.content.decode()
    searched = login("operator").get("/dlq/matching/confirm", {"action": "discard", "q": "mail.send broke"})
    text = html.unescape(searched.content.decode())
    assert not searched.context["exact"] and "at least 0" not in text and "0+" not in text
    assert "none among the newest 5,000" in text and "Discard every match" in text


def test_a_leader_that_stopped_heartbeating_is_flagged_and_dlq_evictions_are_shown(
        client: Client, live_engine: Engine, redis_client: Any) -> None:
    # Beats every 5 s: 9.5 s without one is late, though the worker still counts as alive (30 s)
    # and its 10 s lock has not lapsed yet.
    late = int(live_engine.clock.now_ms() - 9_500)
    redis_client.zadd(live_engine.keys.workers(), {"w-frozen": late})
    redis_client.set(live_engine.keys.leader(), "w-frozen", px=10_000)
    for path in ("/", "/workers/"):
        assert "not heartbeating" in client.get(path).content.decode(), path
    redis_client.zadd(live_engine.keys.workers(), {"w-frozen": live_engine.clock.now_ms()})
    assert "not heartbeating" not in client.get("/workers/").content.decode()
    [tag] = live_engine.registry.ensure("emails").tags  # the DLQ cap evicts per partition
    redis_client.hset(live_engine.keys.stats_counters(tag), "dlq_trimmed", 1234)
    assert "1,234 evicted by the cap" in client.get("/dlq/").content.decode()


def test_a_paused_queue_says_who_paused_it(client: Client, live_engine: Engine) -> None:
    from dtq_core.engine.audit import Actor

    live_engine.tasks.enqueue("dtq.echo", queue="held")
    live_engine.queues.pause("held", Actor.user("night-ops", source="console"))
    assert "paused by <code>user:night-ops</code>" in client.get("/queues/held/").content.decode()


def test_keep_looking_on_the_tasks_page_keeps_its_filters(client: Client, live_engine: Engine) -> None:
    # (A queue filter reads that queue's partitions only: a type filter is what has to look far.)
    live_engine.tasks.enqueue_many([live_engine.tasks.validate("t.rare", {}, queue="busy") for _ in range(3)])
    for _ in range(6):  # newer tasks of another type, more than one page examines
        live_engine.tasks.enqueue_many([live_engine.tasks.validate("dtq.echo", {}, queue="busy") for _ in range(1000)])
    page = client.get("/tasks/", {"type": "t.rare", "queue": "busy"})
    text = html.unescape(page.content.decode())
    assert page.context["page"].items == [] and "keep looking" in text
    link = re.search(r'href="\?([^"]*)">keep looking', text)
    assert link and "type=t.rare" in link.group(1) and "queue=busy" in link.group(1) and "cursor=" in link.group(1)


def test_the_task_page_shows_a_unique_tasks_key_and_mode(client: Client, live_engine: Engine) -> None:
    task_id = live_engine.tasks.enqueue("dtq.echo", unique_key=f"export:{HOSTILE}", unique_mode="while_active").id
    page = client.get(f"/tasks/{task_id}/").content.decode()
    assert "Unique key" in page and f"<code>{html.escape(f'export:{HOSTILE}')}</code> · while_active" in page
    assert HOSTILE not in page


def test_an_unknown_console_address_is_the_consoles_own_404_page(client: Client, live_engine: Engine) -> None:
    response = client.get("/no/such/page/")
    page = response.content.decode()
    assert response.status_code == 404 and response["Content-Type"].startswith("text/html")
    assert "<h1>Page not found</h1>" in page and "/no/such/page/" in page
    assert 'href="/tasks/"' in page and "console.css" in page  # the console's layout and navigation


@pytest.mark.parametrize("path,nav", [("/", "Overview"), ("/tasks/", "Tasks"), ("/dlq/", "Dead letters"),
                                      ("/schedule/", "Schedule"), ("/periodic/", "Periodic"),
                                      ("/workers/", "Workers"), ("/audit/", "Audit")])
def test_every_page_has_an_h1_and_marks_its_place_in_the_navigation(
        client: Client, live_engine: Engine, path: str, nav: str) -> None:
    page = client.get(path).content.decode()
    assert page.count("<h1") == 1, path
    current = [line for line in page.splitlines() if 'aria-current="page"' in line]
    assert len(current) == 1 and f">{nav}</a>" in current[0], current


def test_the_live_feed_is_announced_politely(client: Client, live_engine: Engine) -> None:
    page = client.get("/").content.decode()
    assert '<tbody aria-live="polite" aria-relevant="additions">' in page


def test_a_deeply_nested_payload_is_cut_to_the_budget_not_indented_into_megabytes(
        client: Client, live_engine: Engine) -> None:
    # 60 levels around 150,000 numbers: 300 KB of JSON, which indent=2 once made a page of 19 MB.
    rows: Any = [0] * 150_000
    for _ in range(60):
        rows = [rows]
    task_id = live_engine.tasks.enqueue("dtq.echo", {"rows": rows}).id
    page = client.get(f"/tasks/{task_id}/").content.decode()
    assert len(page) < PRETTY_MAX_CHARS + 50_000
    assert f"… truncated: the whole value is in the API, GET /api/v1/tasks/{task_id}</pre>" in page
    assert '{&quot;rows&quot;:[[[[' in page  # compact, from the start


@pytest.mark.parametrize("value,shown", [
    ({"b": 1, "a": [1, 2]}, '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}'),  # small: indented, as before
    (None, "null"),
    ("[[[", '"[[["'),  # a stored text that is not JSON
])
def test_a_value_that_fits_is_indented(value: Any, shown: str) -> None:
    assert _pretty(value, "GET /api/v1/tasks/t") == shown


def test_a_value_past_the_budget_indented_is_compact_and_cut_with_a_note() -> None:
    nested: Any = ["x" * 100] * (PRETTY_MAX_CHARS // 200)
    for _ in range(50):  # indented, every line gets 100 more spaces: past the budget
        nested = [nested]
    compact = json.dumps(nested, separators=(",", ":"))
    assert len(compact) < PRETTY_MAX_CHARS
    assert _pretty(nested, "GET /api/v1/tasks/t") == compact  # no note: all of it is there
    bigger = [nested, nested]
    shown = _pretty(bigger, "GET /api/v1/tasks/t")
    head, note = shown.rsplit("\n", 1)
    assert head == json.dumps(bigger, separators=(",", ":"))[:PRETTY_MAX_CHARS]
    assert note == "… truncated: the whole value is in the API, GET /api/v1/tasks/t"


def test_a_task_stored_nested_past_what_the_parser_takes_shows_its_text(client: Client, live_engine: Engine
                                                                         ) -> None:
    # Submit refuses a payload nested past MAX_JSON_DEPTH now; one stored before (950 levels were
    # accepted) made the task page and GET /api/v1/tasks/<id> a 500.
    task_id = live_engine.tasks.enqueue("dtq.echo", {}).id
    deep = "[" * 950 + "]" * 950
    live_engine.client.hset(live_engine.keys.task(task_id), "payload", deep)
    response = client.get(f"/tasks/{task_id}/")
    assert response.status_code == 200 and f'id="payload">&quot;{deep}&quot;</pre>' in response.content.decode()
    api = client.get(f"/api/v1/tasks/{task_id}")
    assert api.status_code == 200 and api.json()["payload"] == deep
