"""Every console route, read and posted to by a superuser: with Redis down each is the 503 page (or
a refusal of the request's own), never a 500; with Redis up, a form of junk or of oversized fields
is refused or ignored, never a 500. The routes are read from dtq_dashboard.urls, so a new page is
swept without a change here."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from django.test import Client
from django.urls import URLPattern

import dtq_dashboard.urls
from dtq_core.engine import Engine

PARAMETERS = {"name": "default", "task_id": "abc123-" + "0" * 32, "workflow_id": "abc123-w" + "0" * 31,
              "worker_id": "w1"}
NO_REDIS = ("login/", "logout/")  # the console's own auth pages
JUNK = {"ids": ["x" * 300, "1-0", ""], "task_ids": ["../../etc"], "concurrency": "-1e999", "rate": "many",
        "type": "\u0000", "payload": "{not json", "queue": "a" * 5000, "confirm": "maybe", "count": "NaN",
        "cron": "61 * * * *", "next": "https://elsewhere.example/", "page": "-1", "cursor": "%%%"}


def routes() -> list[str]:
    found = []
    for pattern in dtq_dashboard.urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        found.append(str(pattern.pattern))
    return found


def url(route: str) -> str:
    return "/" + re.sub(r"<str:(\w+)>", lambda m: PARAMETERS[m.group(1)], route)


def assert_not_a_500(response: Any, what: str) -> None:
    assert response.status_code < 500 or response.status_code == 503, (what, response.status_code,
                                                                        response.content[:300])


def test_the_sweep_finds_every_console_route() -> None:
    assert len(routes()) >= 40 and "queues/<str:name>/pause" in routes() and "audit/" in routes()


@pytest.mark.parametrize("route", [r for r in routes() if r not in NO_REDIS])
def test_with_redis_down_every_page_and_action_is_the_503_page_or_a_refusal(
        route: str, login: Callable[[str], Client]) -> None:
    # The autouse settings point at 127.0.0.1:1, where nothing listens.
    client = login("admin")
    for method in ("get", "post"):
        response = getattr(client, method)(url(route), {"ids": ["1-0"], "confirm": "yes"})
        assert_not_a_500(response, method)
        if response.status_code == 503:
            body = response.content
            assert b"Redis is unavailable" in body or b"REDIS_UNAVAILABLE" in body, (method, body[:300])
        else:  # refused for the request's own sake: a page that is GET-only, an action that is POST-only
            assert response.status_code in (302, 400, 404, 405), (method, response.status_code, response.content[:300])


@pytest.mark.parametrize("route", [r for r in routes() if r not in NO_REDIS])
def test_junk_and_oversized_forms_are_refused_never_a_500(route: str, login: Callable[[str], Client],
                                                          live_engine: Engine, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    client = login("admin")
    assert_not_a_500(client.post(url(route), JUNK), "junk")
    assert_not_a_500(client.get(url(route), {k: v for k, v in JUNK.items() if not isinstance(v, list)}), "junk query")
    assert_not_a_500(client.post(url(route), {"ids": ["1-0"], "padding": "x" * 8192}), "oversized")
    assert_not_a_500(client.post(url(route), "{}" * 5000, content_type="application/json"), "json body")
