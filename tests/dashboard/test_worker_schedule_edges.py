"""Edges of the worker page and the schedule actions (issue 24, item 7) the main tests leave out:
a Redis that is down gives the 503 page for the worker page and every new console action; unknown
and oversized ids on the console controls; the console's Stop on a real worker; oversized task ids
on the API's run-now and delete."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.history.handlers"}


def _controller(users: dict[str, User], login: Callable[[str], Client]) -> Client:
    users["operator"].user_permissions.add(Permission.objects.get(codename="control_worker"))
    return login("operator")


def test_with_redis_down_the_worker_page_and_the_new_actions_are_503(users: dict[str, User],
                                                                   login: Callable[[str], Client]) -> None:
    # No redis fixture here: settings point at a dead port.
    client, task = _controller(users, login), "ab-" + "0" * 32
    for send in (lambda: client.get("/workers/w1/"), lambda: client.post("/workers/w1/quiet"),
                 lambda: client.post("/workers/w1/stop"), lambda: client.post(f"/tasks/{task}/run-now"),
                 lambda: client.post(f"/tasks/{task}/delete")):
        started = time.monotonic()
        response = send()
        assert response.status_code == 503 and b"Redis is unavailable" in response.content
        assert time.monotonic() - started < 2


def test_console_controls_refuse_unknown_and_oversized_worker_ids(live_engine: Engine, users: dict[str, User],
                                                                  login: Callable[[str], Client]) -> None:
    client = _controller(users, login)
    for control in ("quiet", "stop"):
        # It should say why, and land where the worker's page says it is gone (404) or bad (400).
        response = client.post(f"/workers/nobody/{control}", follow=True)
        assert response.status_code == 404 and "worker &#x27;nobody&#x27; not found" in response.content.decode()
        assert client.post(f"/workers/{'x' * 300}/{control}", follow=True).status_code == 400
    assert live_engine.audit.list().items == []  # nothing was told, nothing audited


def test_run_now_and_delete_refuse_oversized_task_ids(live_engine: Engine, anonymous_admin: Any) -> None:
    api, huge = APIClient(), "ab-" + "0" * 5000
    for response in (api.post(f"/api/v1/tasks/{huge}/run-now"), api.delete(f"/api/v1/tasks/{huge}")):
        assert response.status_code in (400, 404), response.content[:300]
        assert response.json()["error"]["code"] in ("VALIDATION_ERROR", "TASK_NOT_FOUND")
    assert live_engine.audit.list().items == []


def test_the_console_stop_button_drains_and_exits_a_real_worker(
        live_engine: Engine, users: dict[str, User], login: Callable[[str], Client],
        start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "console-stop", "--queues", "ctl6", **ENV)
    task_id = live_engine.tasks.enqueue("hist.sleep", {"ms": 1500}, queue="ctl6").id
    wait_for(lambda: live_engine.tasks.get(task_id)["status"] == "RUNNING", timeout=20, message=worker.output)
    response = _controller(users, login).post("/workers/console-stop/stop", follow=True)
    assert "Told worker console-stop to stop" in response.content.decode()
    assert worker.wait(timeout=30) == 0
    assert live_engine.tasks.get(task_id)["status"] == "SUCCEEDED"  # drained: it finished first
    entry = live_engine.audit.list().items[0]
    assert (entry["action"], entry["actor"]) == ("worker.stop", "user:operator")
