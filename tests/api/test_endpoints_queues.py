"""GET /api/v1/queues[/<q>] and POST /api/v1/queues/<q>/pause|resume|purge."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.keys import tag_of

from ..redis_server import RedisServer
from .support import assert_error, make_dead_letters


@pytest.fixture
def wide(settings: Any, live_engine: Engine) -> Engine:
    """The process-wide engine with queue "mail" in three partitions (DTQ_QUEUE_PARTITIONS)."""
    from dtq_core.conf import get_engine

    settings.DTQ = {**settings.DTQ, "QUEUE_PARTITIONS": "mail=3"}
    return get_engine()


def test_queue_detail_counts_depth_per_priority_scheduled_and_dead(api: APIClient, live_engine: Engine) -> None:
    make_dead_letters(live_engine, 2, queue="mail")
    for priority, n in (("high", 3), ("normal", 1), ("low", 2)):
        for _ in range(n):
            live_engine.tasks.enqueue("dtq.echo", queue="mail", priority=priority)
    live_engine.tasks.enqueue("dtq.echo", queue="mail", delay_seconds=60)
    q = api.get("/api/v1/queues/mail").json()
    assert q["name"] == "mail" and q["depth"] == {"high": 3, "normal": 1, "low": 2}
    assert q["waiting"] == 6 and q["pending"] == 0 and q["retry_scheduled"] == 1 and q["dlq"] == 2
    assert q["paused"] is False and q["partitions"] == 1
    listed = api.get("/api/v1/queues").json()["results"]
    # The detail adds the queue's limits (test_endpoints_limits.py) to the list's row.
    assert [x["name"] for x in listed] == ["mail"] and {**listed[0], "limits": q["limits"]} == q


def test_a_partitioned_queue_counts_and_acts_as_one_queue(api: APIClient, wide: Engine) -> None:
    queued = [wide.tasks.enqueue("dtq.echo", queue="mail", priority=p).id
              for p in ("high", "high", "high", "normal", "normal", "low")]
    wide.tasks.enqueue("dtq.echo", queue="mail", delay_seconds=60)
    wide.tasks.enqueue("dtq.echo", queue="mail", delay_seconds=60)
    assert len({tag_of(i) for i in queued}) == 3  # spread over the partitions
    q = api.get("/api/v1/queues/mail").json()
    assert q["depth"] == {"high": 3, "normal": 2, "low": 1} and q["waiting"] == 6 and q["retry_scheduled"] == 2
    assert q["partitions"] == 3 and q["dlq"] == 0
    events = wide.client.pubsub(ignore_subscribe_messages=True)
    events.subscribe(wide.keys.events())
    assert api.post("/api/v1/queues/mail/pause").json()["changed"] is True
    layout = wide.registry.get("mail", fresh=True)
    assert layout is not None and all(wide.client.exists(wide.keys.paused(tag)) for tag in layout.tags)
    assert api.post("/api/v1/queues/mail/resume").json()["paused"] is False
    assert api.post("/api/v1/queues/mail/purge").json() == {"queue": "mail", "count": 6}
    published: list[str] = []
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        message = events.get_message(timeout=0.1)
        if message is not None:
            published.append(json.loads(message["data"])["type"])
    events.close()
    # One event per queue-wide change, however many partitions changed.
    assert [t for t in published if t.startswith("queue.")] == ["queue.paused", "queue.resumed", "queue.purged"]
    assert published.count("task.cancelled") == 6
    assert api.get("/api/v1/queues/mail").json()["waiting"] == 0


@pytest.mark.parametrize("name", ["nope", "UPPER", "a" * 65, "dlq"])
def test_an_unknown_queue_is_404(api: APIClient, name: str) -> None:
    assert_error(api.get(f"/api/v1/queues/{name}"), 404, "QUEUE_NOT_FOUND")
    assert_error(api.post(f"/api/v1/queues/{name}/resume"), 404, "QUEUE_NOT_FOUND")
    assert_error(api.post(f"/api/v1/queues/{name}/purge"), 404, "QUEUE_NOT_FOUND")
    if name != "nope":  # a name that cannot be a queue; "nope" could: pausing it registers it (below)
        assert_error(api.post(f"/api/v1/queues/{name}/pause"), 404, "QUEUE_NOT_FOUND")


def test_pause_and_resume_flip_the_flag_once_and_are_audited(api: APIClient, live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="q1")
    events = live_engine.client.pubsub(ignore_subscribe_messages=True)
    events.subscribe(live_engine.keys.events())
    first = api.post("/api/v1/queues/q1/pause")
    assert first.status_code == 200 and first.json()["paused"] is True and first.json()["changed"] is True
    assert api.post("/api/v1/queues/q1/pause").json()["changed"] is False
    shown = api.get("/api/v1/queues/q1").json()
    assert shown["paused"] is True and shown["paused_by"] == "api:anonymous" and shown["paused_at"].endswith("Z")
    assert shown["paused_at"] == first.json()["paused_at"]  # the second pause changed nothing, not even who
    resumed = api.post("/api/v1/queues/q1/resume").json()
    assert resumed["paused"] is False and resumed["changed"] is True
    assert resumed["paused_by"] is None and resumed["paused_at"] is None
    actions = [(e["action"], e["target"], e["count"]) for e in live_engine.audit.list().items]
    assert actions == [("queue.resume", "queue:q1", 1), ("queue.pause", "queue:q1", 0),
                       ("queue.pause", "queue:q1", 1)]
    # One event per change of state: the second pause changed nothing and published nothing.
    published: list[str] = []
    deadline = time.monotonic() + 1.0  # all were published before the responses came back
    while time.monotonic() < deadline:
        message = events.get_message(timeout=0.1)
        if message is not None:
            published.append(json.loads(message["data"])["type"])
    events.close()
    assert published == ["queue.paused", "queue.resumed"]


def test_a_paused_queue_is_not_served(api: APIClient, live_engine: Engine) -> None:
    from .support import drain

    task = live_engine.tasks.enqueue("dtq.echo", queue="held")
    api.post("/api/v1/queues/held/pause")
    drain(live_engine.config, queues=["held"])
    assert live_engine.tasks.get(task.id)["status"] == "QUEUED"
    api.post("/api/v1/queues/held/resume")
    drain(live_engine.config, queues=["held"])
    assert live_engine.tasks.get(task.id)["status"] == "SUCCEEDED"


def test_purge_cancels_the_waiting_tasks_and_reports_the_count(api: APIClient, live_engine: Engine) -> None:
    waiting = [live_engine.tasks.enqueue("dtq.echo", queue="p", priority=p).id
               for p in ("high", "normal", "low", "low")]
    delayed = live_engine.tasks.enqueue("dtq.echo", queue="p", delay_seconds=60).id
    other = live_engine.tasks.enqueue("dtq.echo", queue="other").id
    response = api.post("/api/v1/queues/p/purge")
    assert response.status_code == 200 and response.json() == {"queue": "p", "count": 4}
    assert {live_engine.tasks.get(i)["status"] for i in waiting} == {"CANCELLED"}
    assert live_engine.tasks.get(delayed)["status"] == "PENDING"  # scheduled work is not "waiting"
    assert live_engine.tasks.get(other)["status"] == "QUEUED"
    assert api.get("/api/v1/queues/p").json()["waiting"] == 0
    entry = live_engine.audit.list(limit=1).items[0]
    assert (entry["action"], entry["target"], entry["count"]) == ("queue.purge", "queue:p", 4)
    assert api.post("/api/v1/queues/p/purge").json()["count"] == 0


def test_queue_actions_refuse_wrong_methods(api: APIClient, live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo")
    assert_error(api.get("/api/v1/queues/default/pause"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.delete("/api/v1/queues/default"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.post("/api/v1/queues"), 405, "METHOD_NOT_ALLOWED")


def test_queue_endpoints_answer_503_when_redis_is_down(settings: Any) -> None:
    api = APIClient()
    for response in (api.get("/api/v1/queues"), api.get("/api/v1/queues/default"),
                     api.post("/api/v1/queues/default/pause"), api.post("/api/v1/queues/default/purge")):
        assert_error(response, 503, "REDIS_UNAVAILABLE")


def test_a_frozen_redis_gives_503_within_2_seconds(frozen_redis: RedisServer) -> None:
    api = APIClient()
    for path in ("/api/v1/queues", "/api/v1/dlq"):
        started = time.monotonic()
        assert_error(api.get(path), 503, "REDIS_UNAVAILABLE")
        assert time.monotonic() - started < 2
    started = time.monotonic()
    assert_error(api.post("/api/v1/queues/default/pause"), 503, "REDIS_UNAVAILABLE")
    assert time.monotonic() - started < 2


def test_delete_refuses_a_non_empty_queue_then_deletes_it_once_empty(api: APIClient, live_engine: Engine) -> None:
    task = live_engine.tasks.enqueue("dtq.echo", queue="junk")
    error = assert_error(api.post("/api/v1/queues/junk/delete"), 409, "QUEUE_NOT_EMPTY")
    assert "1 waiting" in error["message"]
    assert api.get("/api/v1/queues/junk").status_code == 200  # nothing changed
    api.post(f"/api/v1/tasks/{task.id}/cancel")
    response = api.post("/api/v1/queues/junk/delete")
    assert response.status_code == 200 and response.json() == {"queue": "junk", "deleted": True}
    assert_error(api.get("/api/v1/queues/junk"), 404, "QUEUE_NOT_FOUND")
    assert [q["name"] for q in api.get("/api/v1/queues").json()["results"]] == []
    assert_error(api.post("/api/v1/queues/junk/delete"), 404, "QUEUE_NOT_FOUND")
    assert_error(api.post("/api/v1/queues/UPPER/delete"), 404, "QUEUE_NOT_FOUND")
    entry = live_engine.audit.list().items[0]
    assert (entry["action"], entry["target"], entry["actor"]) == ("queue.delete", "queue:junk", "api:anonymous")
    assert api.get("/api/v1/queues/junk/delete").status_code == 405


def test_a_submit_to_a_new_queue_past_the_bound_is_409_and_a_batch_item_gets_the_error(
        api: APIClient, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "MAX_QUEUES": 2}
    for queue in ("one", "two"):
        assert api.post("/api/v1/tasks", {"type": "dtq.echo", "queue": queue}, format="json").status_code == 201
    error = assert_error(api.post("/api/v1/tasks", {"type": "dtq.echo", "queue": "three"}, format="json"), 409,
                         "QUEUE_LIMIT_REACHED")
    assert "DTQ_MAX_QUEUES" in error["message"] and "'three'" in error["message"]
    batch = api.post("/api/v1/tasks/batch", {"tasks": [{"type": "dtq.echo", "queue": "one"},
                                                       {"type": "dtq.echo", "queue": "three"}]}, format="json")
    results = batch.json()["results"]
    assert batch.status_code == 200 and results[0]["created"] is True
    assert results[1]["error"]["code"] == "QUEUE_LIMIT_REACHED"
    assert [q["name"] for q in api.get("/api/v1/queues").json()["results"]] == ["one", "two"]


def test_a_queue_that_never_saw_a_task_is_paused_ahead_of_a_deploy(api: APIClient, live_engine: Engine) -> None:
    # An operator pauses a queue before the deploy that starts using it: the first tasks wait.
    paused = api.post("/api/v1/queues/fresh-queue/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True
    from .support import drain

    task = live_engine.tasks.enqueue("dtq.echo", queue="fresh-queue")
    drain(live_engine.config, queues=["fresh-queue"])
    assert live_engine.tasks.get(task.id)["status"] == "QUEUED"
    assert api.get("/api/v1/queues/fresh-queue").json()["paused"] is True
