"""Task search (issue 24, item 3): by id prefix, creation time and text in the payload or errors,
across waiting, running, scheduled, finished and dead tasks, with stable paging and a bounded scan
that says when it stopped early; in the API and the console."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
import redis
from django.test import Client
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST
from .support import assert_error

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.history.handlers"}


def _search(api: APIClient, **params: Any) -> dict[str, Any]:
    response = api.get("/api/v1/tasks", params)
    assert response.status_code == 200, response.content
    return response.json()


def _all_pages(api: APIClient, **params: Any) -> list[str]:
    ids: list[str] = []
    body = _search(api, **params)
    while True:
        ids += [t["id"] for t in body["results"]]
        if not body["next"]:
            return ids
        body = api.get(body["next"]).json()


def test_text_finds_tasks_in_every_state(live_engine: Engine, start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    actor = Actor(name="cli:test", source="cli")
    engine.queues.pause("parked", actor)
    waiting = engine.tasks.enqueue("hist.sleep", {"order": "Needle-1"}, queue="parked").id
    scheduled = engine.tasks.enqueue("hist.sleep", {"order": "needle-2"}, queue="s", delay_seconds=600).id
    running = engine.tasks.enqueue("hist.sleep", {"order": "NEEDLE-3", "ms": 60000}, queue="live").id
    done = engine.tasks.enqueue("hist.sleep", {"order": "needle-4"}, queue="live").id
    dead = engine.tasks.enqueue("hist.fail", {"x": 1}, queue="live", max_attempts=1).id  # its error says "refused"
    engine.tasks.enqueue("hist.sleep", {"order": "haystack"}, queue="live")
    worker = start_worker("--name", "s", "--queues", "live", **ENV)
    wait_for(lambda: engine.tasks.get(dead)["status"] == "DEAD_LETTERED" and engine.tasks.get(done)["status"]
             == "SUCCEEDED" and engine.tasks.get(running)["status"] == "RUNNING", timeout=20, message=worker.output)

    found = {t["id"]: t["status"] for t in _search(api, q="needle")["results"]}
    # A succeeded task's compact record keeps no payload (DTQ_KEEP_PAYLOAD=failed, the default):
    # text finds it only with DTQ_KEEP_PAYLOAD=all; every other filter finds it.
    assert found == {waiting: "QUEUED", scheduled: "PENDING", running: "RUNNING"}
    assert [t["id"] for t in _search(api, id_prefix=done[:20], status="SUCCEEDED")["results"]] == [done]
    assert [t["id"] for t in _search(api, q="on PURPOSE")["results"]] == [dead]  # the error, any case
    assert [t["id"] for t in _search(api, q="needle", status="RUNNING")["results"]] == [running]
    assert _search(api, q="nothing like it") == {"results": [], "next": None, "stopped_early": False}


def test_id_prefix_and_time_range(live_engine: Engine) -> None:
    engine, api = live_engine, APIClient()
    first = [engine.tasks.enqueue("dtq.echo", queue="ids").id for _ in range(3)]
    time.sleep(0.01)  # a later millisecond for the second batch (the range is in ms)
    middle = datetime.now(UTC).isoformat()
    time.sleep(0.01)
    second = [engine.tasks.enqueue("dtq.echo", queue="ids").id for _ in range(3)]
    target = second[1]
    assert [t["id"] for t in _search(api, id_prefix=target[:20])["results"]] == [target]
    tag = target.split("-")[0]
    assert set(_all_pages(api, id_prefix=tag)) == set(first + second)
    assert set(_all_pages(api, created_after=middle)) == set(second)
    assert set(_all_pages(api, created_before=middle)) == set(first)
    assert _all_pages(api, created_after=middle, created_before=middle) == []


def test_paging_is_stable_while_tasks_arrive(live_engine: Engine) -> None:
    engine, api = live_engine, APIClient()
    ids = [engine.tasks.enqueue("dtq.echo", {"tag": f"match {i}"}, queue="pages").id for i in range(120)]
    body = _search(api, q="match", limit=50)
    seen = [t["id"] for t in body["results"]]
    for i in range(30):  # newer matches arrive between pages: they go above, never into later pages
        engine.tasks.enqueue("dtq.echo", {"tag": f"match late {i}"}, queue="pages")
    while body["next"]:
        body = api.get(body["next"]).json()
        seen += [t["id"] for t in body["results"]]
    assert len(seen) == len(set(seen)) == 120 and set(seen) == set(ids)


def test_a_search_past_the_scan_budget_says_it_stopped_early_and_goes_on(live_engine: Engine,
                                                                         redis_client: redis.Redis) -> None:
    engine, api = live_engine, APIClient()
    oldest = engine.tasks.enqueue("dtq.echo", {"k": "the-one"}, queue="big").id
    from dtq_core.submit import validate

    for _ in range(7):  # 7,000 newer tasks that do not match, in bulk
        engine.tasks.enqueue_many([engine.tasks.place(validate(engine.config, "dtq.echo", {"k": "other"},
                                                               queue="big"))[0] for _ in range(1000)])
    body = _search(api, q="the-one", limit=10)
    assert body["results"] == [] and body["stopped_early"] is True and body["next"]
    pages = 1
    while not body["results"]:
        assert body["next"], "the walk ended without finding the task"
        body = api.get(body["next"]).json()
        pages += 1
    assert [t["id"] for t in body["results"]] == [oldest] and pages == 2


@pytest.mark.parametrize(("query", "field"), [
    ("q=" + "x" * 201, "q"), ("id_prefix=UPPER", "id_prefix"), ("id_prefix=abc-xyz", "id_prefix"),
    ("id_prefix=" + "a" * 17, "id_prefix"), ("created_after=yesterday", "created_after"),
    ("created_before=2026-13-01", "created_before"),
    ("created_after=2026-12-05T10:00:00Z&created_before=2026-12-05T09:00:00Z", "created_after"),
])
def test_bad_search_terms_are_a_400_naming_the_field(live_engine: Engine, query: str, field: str) -> None:
    error = assert_error(APIClient().get(f"/api/v1/tasks?{query}"), 400, "VALIDATION_ERROR")
    assert error["field"] == field


def test_search_answers_503_when_redis_is_down() -> None:
    assert_error(APIClient().get("/api/v1/tasks?q=x&id_prefix=ab"), 503, "REDIS_UNAVAILABLE")


def test_the_console_searches_by_text_prefix_and_time(live_engine: Engine, db: Any) -> None:
    engine, client = live_engine, Client()
    hit = engine.tasks.enqueue("dtq.echo", {"invoice": "INV-77"}, queue="console").id
    engine.tasks.enqueue("dtq.echo", {"invoice": "INV-78"}, queue="console")
    html = client.get("/tasks/", {"q": "inv-77"}).content.decode()
    assert f'data-task="{hit}"' in html and html.count("data-task=") == 1
    html = client.get("/tasks/", {"id": hit[:12]}).content.decode()
    assert f'data-task="{hit}"' in html
    assert client.get("/tasks/", {"id": hit}).status_code == 302  # a whole id opens its page
    later = datetime.now(UTC).replace(tzinfo=None).strftime("%Y-%m-%dT%H:%M")
    html = client.get("/tasks/", {"after": later, "q": "inv"}).content.decode()
    assert "data-task=" not in html or html.count("data-task=") <= 2
    assert client.get("/tasks/", {"after": "not a time"}).status_code == 400
    assert client.get("/tasks/", {"q": "x" * 300}).status_code == 400
