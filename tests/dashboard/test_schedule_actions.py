"""The schedule page's actions (issue 24, item 7): Run now, Cancel and Delete on a delayed task or
a waiting retry, in the console and the API (POST /api/v1/tasks/<id>/run-now, DELETE
/api/v1/tasks/<id>), audited, permission-checked; refusals for running, ended and unknown tasks,
bad ids and a Redis that is down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.test import Client
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..api.support import assert_error
from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.history.handlers"}


def test_run_now_queues_a_delayed_task_at_once(live_engine: Engine, anonymous_admin: Any,
                                               start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    worker = start_worker("--name", "sched", "--queues", "later", **ENV)
    task_id = engine.tasks.enqueue("hist.sleep", {"ms": 1}, queue="later", delay_seconds=3600).id
    response = api.post(f"/api/v1/tasks/{task_id}/run-now")
    assert response.status_code == 202 and response.json()["status"] == "PENDING"
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=15, message=worker.output)
    assert_error(api.post(f"/api/v1/tasks/{task_id}/run-now"), 409, "TASK_TERMINAL")
    assert [e["action"] for e in engine.audit.list().items] == ["task.run_now"]


def test_run_now_refuses_a_task_not_in_the_schedule(live_engine: Engine, anonymous_admin: Any) -> None:
    api = APIClient()
    queued = live_engine.tasks.enqueue("dtq.echo", queue="now").id
    error = assert_error(api.post(f"/api/v1/tasks/{queued}/run-now"), 409, "TASK_NOT_SCHEDULED")
    assert "QUEUED" in error["message"]
    assert_error(api.post("/api/v1/tasks/zz-" + "0" * 32 + "/run-now"), 404, "TASK_NOT_FOUND")
    assert_error(api.post("/api/v1/tasks/not-an-id/run-now"), 404, "TASK_NOT_FOUND")
    assert live_engine.audit.list().items == [] or all(e["outcome"] != "ok" for e in live_engine.audit.list().items)


def test_delete_cancels_a_waiting_task_and_removes_it(live_engine: Engine, anonymous_admin: Any) -> None:
    engine, api = live_engine, APIClient()
    task_id = engine.tasks.enqueue("dtq.echo", queue="del", delay_seconds=3600).id
    assert engine.schedule.count() == 1
    assert api.delete(f"/api/v1/tasks/{task_id}").status_code == 204
    assert_error(api.get(f"/api/v1/tasks/{task_id}"), 404, "TASK_NOT_FOUND")
    assert engine.schedule.count() == 0
    assert task_id not in [t["id"] for t in api.get("/api/v1/tasks").json()["results"]]
    assert_error(api.delete(f"/api/v1/tasks/{task_id}"), 404, "TASK_NOT_FOUND")
    assert [e["action"] for e in engine.audit.list().items] == ["task.delete"]
    engine.queues.delete("del", engine_actor())  # nothing left behind: the queue is empty


def test_delete_refuses_a_running_task(live_engine: Engine, anonymous_admin: Any,
                                       start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    worker = start_worker("--name", "del-run", "--queues", "busy", **ENV)
    task_id = engine.tasks.enqueue("hist.sleep", {"ms": 3000}, queue="busy").id
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "RUNNING", timeout=20, message=worker.output)
    assert_error(api.delete(f"/api/v1/tasks/{task_id}"), 409, "TASK_RUNNING")
    assert engine.tasks.get(task_id)["status"] == "RUNNING"


def test_the_schedule_actions_need_the_permission(live_engine: Engine) -> None:
    task_id = live_engine.tasks.enqueue("dtq.echo", queue="p", delay_seconds=60).id
    api = APIClient()
    for response in (api.post(f"/api/v1/tasks/{task_id}/run-now"), api.delete(f"/api/v1/tasks/{task_id}")):
        assert response.status_code in (401, 403)
    assert live_engine.tasks.get(task_id)["status"] == "PENDING"


def test_the_endpoints_answer_503_when_redis_is_down(anonymous_admin: Any) -> None:
    task = "ab-" + "0" * 32
    assert_error(APIClient().post(f"/api/v1/tasks/{task}/run-now"), 503, "REDIS_UNAVAILABLE")
    assert_error(APIClient().delete(f"/api/v1/tasks/{task}"), 503, "REDIS_UNAVAILABLE")


def test_the_schedule_page_runs_cancels_and_deletes(live_engine: Engine, login: Callable[[str], Client]) -> None:
    engine = live_engine
    ids = [engine.tasks.enqueue("dtq.echo", {"n": i}, queue="page", delay_seconds=600 + i).id for i in range(3)]
    viewer = login("viewer").get("/schedule/").content.decode()
    assert "Run now</button>" not in viewer
    operator = login("operator")
    html = operator.get("/schedule/").content.decode()
    assert html.count("Run now</button>") == 3 and html.count("Delete</button>") == 3
    response = operator.post(f"/tasks/{ids[0]}/run-now", {"next": "/schedule/"}, follow=True)
    assert "is due now" in response.content.decode()
    assert engine.tasks.get(ids[0])["status"] == "PENDING"
    operator.post(f"/tasks/{ids[1]}/cancel", {"next": "/schedule/"})
    assert engine.tasks.get(ids[1])["status"] == "CANCELLED"
    response = operator.post(f"/tasks/{ids[2]}/delete", {"next": "/schedule/"}, follow=True)
    assert f"Deleted task {ids[2]}" in response.content.decode()
    assert operator.get(f"/tasks/{ids[2]}/").status_code == 404
    assert login("viewer").post(f"/tasks/{ids[0]}/delete").status_code in (302, 403)
    assert operator.get(f"/tasks/{ids[0]}/delete").status_code == 405
    assert {e["action"] for e in engine.audit.list().items} >= {"task.run_now", "task.cancel", "task.delete"}


def engine_actor() -> Any:
    from dtq_core.engine.audit import Actor

    return Actor(name="cli:test", source="cli")
