"""Enqueue from the console (issue 24, item 5): a form with the registered task types, queue,
priority and a JSON payload, for staff with the enqueue permission, audited as them; bad JSON, an
unknown type, an oversized or too deeply nested payload and a bad queue come back as the form with
the reason and enqueue nothing; a Redis that is down is the 503 page."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from dtq_core.engine import Engine

from .conftest import make_user


@pytest.fixture
def enqueuer(db: Any) -> Client:
    client = Client()
    client.force_login(make_user("enqueuer", staff=True, perms=("enqueue_task",)))
    return client


def submit(client: Client, **values: str) -> Any:
    return client.post("/tasks/new/submit", {"type": "dtq.echo", "queue": "ops", "priority": "high",
                                             "payload": '{"n": 1}', **values})


def test_the_form_lists_the_registered_types(enqueuer: Client, live_engine: Engine) -> None:
    live_engine.client.hset(live_engine.keys.task_types(), mapping={"reports.build": int(time.time() * 1000),
                                                                   "emails.send": int(time.time() * 1000)})
    page = enqueuer.get("/tasks/new/").content.decode()
    assert '<option value="emails.send">' in page and '<option value="reports.build">' in page
    assert "2 types registered by workers" in page and ">Enqueue</button>" in page
    assert "Enqueue a task…" in enqueuer.get("/tasks/").content.decode()


def test_an_operator_enqueues_a_task_and_it_is_audited(enqueuer: Client, live_engine: Engine) -> None:
    response = submit(enqueuer)
    assert response.status_code == 302
    task_id = response["Location"].split("/")[-2]
    task = live_engine.tasks.get(task_id)
    assert (task["type"], task["queue"], task["priority"], task["payload"]) == ("dtq.echo", "ops", "high", {"n": 1})
    entry = next(e for e in live_engine.audit.list(limit=20).items if e["action"] == "task.enqueue")
    assert entry["actor"] == "user:enqueuer" and entry["source"] == "console" and entry["target"] == "queue:ops"
    assert entry["outcome"] == "finished"
    assert entry["selection"] == {"type": "dtq.echo", "queue": "ops", "task_id": task_id}  # the trail leads to it


@pytest.mark.parametrize("values,status,message", [
    ({"payload": "{not json"}, 400, "The payload is not JSON"),
    ({"type": "bad type!"}, 400, "type must be"),
    ({"queue": "Bad Queue"}, 400, "queue must match"),
    ({"priority": "urgent"}, 400, "priority must be one of"),
    ({"payload": json.dumps({"blob": "x" * 2000})}, 413, "the limit is 1000"),
    # Nested past the API's limit: deep enough, json.loads exhausted the stack (a 500 page).
    ({"payload": "[" * 201 + "]" * 201}, 400, "more than 200 levels deep"),
    ({"payload": "[" * 100_000 + "]" * 100_000}, 400, "more than 200 levels deep"),
])
def test_bad_input_comes_back_as_the_form_and_enqueues_nothing(
        enqueuer: Client, live_engine: Engine, settings: Any, values: dict[str, str], status: int,
        message: str) -> None:
    settings.DTQ = {**settings.DTQ, "PAYLOAD_MAX_BYTES": 1000}
    response = submit(enqueuer, **values)
    page = response.content.decode()
    assert response.status_code == status and message in page and 'id="enqueue-form"' in page
    assert 'role="alert"' in page
    assert live_engine.tasks.list().items == []
    assert not [e for e in live_engine.audit.list(limit=20).items if e["action"] == "task.enqueue"]


def test_an_unknown_type_is_refused_once_workers_registered_theirs(enqueuer: Client, live_engine: Engine) -> None:
    live_engine.client.hset(live_engine.keys.task_types(), "dtq.echo", int(time.time() * 1000))
    response = submit(enqueuer, type="nobody.serves")
    assert response.status_code == 400 and "nobody.serves" in response.content.decode()
    assert live_engine.tasks.list().items == []


def test_without_the_permission_nothing_is_enqueued(login: Callable[[str], Client], live_engine: Engine,
                                                    users: dict[str, User]) -> None:
    for name in ("operator", "readonly_staff", "viewer"):
        response = submit(login(name))
        assert response.status_code in (302, 403), name
        if response.status_code == 302:
            assert "/login/" in response["Location"]
    assert Client().post("/tasks/new/submit", {"type": "dtq.echo"}).status_code == 302  # to the login page
    assert live_engine.tasks.list().items == []
    assert "Enqueue a task…" not in login("operator").get("/tasks/").content.decode()
    assert Client().get("/tasks/new/submit").status_code == 405


def test_redis_down_is_the_503_page(enqueuer: Client, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    assert submit(enqueuer).status_code == 503
    assert enqueuer.get("/tasks/new/").status_code == 503
