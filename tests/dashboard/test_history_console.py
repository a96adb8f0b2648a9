"""The console's history (issue 24, items 1-2): charts on the overview and queue pages, the task
types pages and the fragment the pages redraw from, with the numbers a reader checks in the data
tables under the charts; bad input and a Redis that is down."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.history.handlers"}


def _table_value(html: str, title: str, label: str) -> str:
    """The value of a row of the data table under the chart titled so."""
    section = html.split(f"<summary>Data: {title}", 1)[1].split("</details>", 1)[0]
    match = re.search(rf'data-chart-value="{re.escape(label)}">([^<]*)<', section)
    assert match, (title, label, section)
    return match.group(1)


@pytest.fixture
def finished(live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> Engine:
    """12 tasks succeeded and 2 dead-lettered after a retry each, in queue "charts", by a real worker
    (the leader), rolled up for the all-queues series."""
    engine = live_engine
    for _ in range(12):
        engine.tasks.enqueue("hist.sleep", {"ms": 20}, queue="charts")
    for _ in range(2):
        engine.tasks.enqueue("hist.fail", queue="charts", max_attempts=2)
    worker = start_worker("--name", "c", "--queues", "charts", **ENV)
    wait_for(lambda: engine.history.stats("1h", types=False)["totals"]["dead_lettered"] == 2
             and engine.history.stats("1h", types=False)["totals"]["succeeded"] == 12, timeout=30,
             message=worker.output)
    return engine


def test_the_overview_draws_outcomes_and_failures_with_their_numbers(finished: Engine, login: Callable[[str], Client]
                                                                    ) -> None:
    html = login("viewer").get("/").content.decode()
    assert 'id="history"' in html and html.count('<svg class="chart"') == 3
    title = "Tasks finished per minute, by outcome"
    assert _table_value(html, title, "Succeeded") == "12" and _table_value(html, title, "Dead-lettered") == "2"
    failures = "Failures and retries per minute"
    assert _table_value(html, failures, "Retried") == "2"
    assert _table_value(html, failures, "Error rate") == "14.3 %"
    # The SVG says the same to a screen reader.
    assert "Succeeded 12" in html and "Dead-lettered 2" in html
    assert 'aria-current="true" class="active">1h<' in html


def test_the_queue_page_draws_wait_run_and_depth(finished: Engine, login: Callable[[str], Client]) -> None:
    html = login("viewer").get("/queues/charts/?range=24h").content.decode()
    assert html.count('<svg class="chart"') == 4
    assert _table_value(html, "Tasks finished per 5 minutes, by outcome", "Succeeded") == "12"
    p50 = _table_value(html, "Run time, percentiles", "p50")
    assert p50.endswith(" ms") and 10 <= float(p50.split()[0]) <= 40, p50
    assert _table_value(html, "Wait time (ready to started), percentiles", "p99") != "—"
    assert "Waiting tasks" in html
    assert 'aria-current="true" class="active">24h<' in html


def test_the_types_pages_list_the_slowest_first_and_draw_one_type(finished: Engine, login: Callable[[str], Client]
                                                                  ) -> None:
    client = login("viewer")
    html = client.get("/types/?range=1h").content.decode()
    rows = re.findall(r'<tr data-type="([^"]+)">', html)
    assert rows == ["hist.sleep", "hist.fail"]  # 20 ms handlers are slower than failures
    fail_row = html.split('<tr data-type="hist.fail">', 1)[1].split("</tr>", 1)[0]
    assert 'data-label="Error rate">100.0 %<' in fail_row and 'data-label="Dead-lettered">2<' in fail_row
    html = client.get("/types/hist.sleep/?range=7d").content.decode()
    assert "<h1>Type <code>hist.sleep</code></h1>" in html
    assert _table_value(html, "Tasks finished per hour, by outcome", "Succeeded") == "12"
    assert client.get("/types/?queue=charts").status_code == 200


def test_the_fragment_is_the_history_section_alone(finished: Engine, login: Callable[[str], Client]) -> None:
    response = login("viewer").get("/history/fragment", {"range": "1h", "view": "queue", "queue": "charts"})
    html = response.content.decode()
    assert response.status_code == 200 and html.strip().startswith("{#") is False
    assert html.lstrip().startswith('<section class="card history" id="history"')
    assert "<html" not in html and _table_value(html, "Tasks finished per minute, by outcome", "Succeeded") == "12"


@pytest.mark.parametrize("url", ["/?range=2d", "/queues/charts/?range=x", "/types/?range=" + "9" * 3000,
                                 "/history/fragment?view=nope", "/types/?queue=Bad%20Name",
                                 "/history/fragment?type=a%7Cb"])
def test_bad_ranges_and_names_are_a_400_page(live_engine: Engine, login: Callable[[str], Client], url: str) -> None:
    live_engine.tasks.enqueue("hist.sleep", queue="charts")
    response = login("viewer").get(url)
    assert response.status_code == 400 and b"Bad request" in response.content


def test_an_unknown_queue_s_fragment_is_a_404(live_engine: Engine, login: Callable[[str], Client]) -> None:
    response = login("viewer").get("/history/fragment", {"view": "queue", "queue": "never"})
    assert response.status_code == 404


def test_history_pages_say_redis_is_down(users: Any, login: Callable[[str], Client]) -> None:
    client = login("viewer")
    for url in ("/types/", "/types/x/", "/history/fragment"):
        response = client.get(url)
        assert response.status_code == 503 and b"Redis" in response.content, url


def test_charts_need_a_login_when_the_console_does(finished: Engine, settings: Any) -> None:
    settings.DTQ_CONSOLE_LOGIN_REQUIRED = True
    response = Client().get("/history/fragment")
    assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_other_row_says_what_it_sums_and_links_to_no_tasks(live_engine: Engine, dtq_settings: Any,
                                                               login: Callable[[str], Client]) -> None:
    # "(other)" is no type: its page once linked to /tasks/?type=(other), which is a 400 page.
    from dtq_core.engine.audit import Actor

    dtq_settings.DTQ = {**dtq_settings.DTQ, "ACCEPT_UNKNOWN_TYPES": True}
    actor = Actor.user("ops", source="console")
    for i in range(105):  # past the 100 types a partition's history keeps apart
        live_engine.tasks.cancel(live_engine.tasks.enqueue(f"made.up{i:03d}", queue="default").id, actor)
    client = login("viewer")
    html = client.get("/types/?queue=default").content.decode()
    row = html.split('<tr data-type="(other)">', 1)[1].split("</tr>", 1)[0]
    assert "the types past the cap" in row
    link = re.search(r'href="([^"]*/types/\(other\)/[^"]*)"', row)
    assert link
    page = client.get(link.group(1).replace("&amp;", "&")).content.decode()
    assert "sums the types past the history" in page and "Its tasks" not in page and "/tasks/?type=" not in page
    assert "Its tasks →" in client.get("/types/made.up000/").content.decode()
