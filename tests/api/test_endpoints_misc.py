"""GET /api/v1/audit, /workers, /schedule; /health, /ready; /api/schema/; the browsable API; the
envelope for unknown routes with DEBUG on and off."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from django.test import Client
from drf_spectacular.validation import validate_schema
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..conftest import wait_for
from .support import assert_error

# -- audit ------------------------------------------------------------------------------------

def test_audit_is_newest_first_and_filters_by_action_actor_and_source(api: APIClient, live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="a")
    live_engine.queues.pause("a", Actor.cli())
    api.post("/api/v1/queues/a/resume", HTTP_X_REQUEST_ID="r-1")
    api.post("/api/v1/queues/a/purge")
    entries = api.get("/api/v1/audit").json()["results"]
    assert [e["action"] for e in entries] == ["queue.purge", "queue.resume", "queue.pause"]
    assert entries[1]["request_id"] == "r-1" and entries[1]["ts"].endswith("Z")
    assert entries[2]["actor"].startswith("cli:") and entries[2]["source"] == "cli"
    assert [e["action"] for e in api.get("/api/v1/audit?source=api").json()["results"]] == \
        ["queue.purge", "queue.resume"]
    assert len(api.get("/api/v1/audit?action=queue.pause").json()["results"]) == 1
    assert len(api.get("/api/v1/audit?actor=api:anonymous").json()["results"]) == 2
    first = api.get("/api/v1/audit?limit=2").json()
    assert len(first["results"]) == 2 and first["next"]
    rest = api.get(first["next"]).json()
    assert [e["action"] for e in rest["results"]] == ["queue.pause"] and rest["next"] is None


@pytest.mark.parametrize("query", ["limit=0", "cursor=zzz", "actor=" + "a" * 300])
def test_audit_refuses_bad_parameters(api: APIClient, query: str) -> None:
    assert_error(api.get(f"/api/v1/audit?{query}"), 400, "VALIDATION_ERROR")


# -- workers and schedule -----------------------------------------------------------------------

def test_workers_show_heartbeat_age_in_flight_and_queues(
        api: APIClient, live_engine: Engine, start_worker: Any) -> None:
    assert api.get("/api/v1/workers").json() == {"results": [], "scheduler_leader": None}
    task = live_engine.tasks.enqueue("dtq.sleep", {"seconds": 30}, queue="slow")
    start_worker("--queues", "slow,fast", "--name", "w-api", "--concurrency", "3", DTQ_HEARTBEAT_INTERVAL_S="0.5")
    wait_for(lambda: live_engine.tasks.get(task.id)["status"] == "RUNNING", timeout=20)
    body = wait_for(lambda: (b := api.get("/api/v1/workers").json())["results"]
                    and b["results"][0]["in_flight"] == 1 and b, timeout=10)
    worker = body["results"][0]
    assert worker["id"] == "w-api" and worker["queues"] == ["slow", "fast"] and worker["concurrency"] == 3
    assert worker["alive"] is True and 0 <= worker["heartbeat_age_s"] < 5 and worker["heartbeat_at"]
    assert body["scheduler_leader"] == "w-api" and worker["leader"] is True


def test_a_silent_worker_is_shown_lost_and_without_made_up_details(
        api: APIClient, live_engine: Engine, redis_client: Any) -> None:
    # Two workers that stopped beating: one whose details hash is still there, one whose hash
    # expired (a SIGKILLed worker, some minutes later). Neither may look like it is running.
    now = live_engine.clock.now_ms()
    old = int(now - (live_engine.config.visibility_timeout_s + 5) * 1000)
    redis_client.zadd(live_engine.keys.workers(), {"w-silent": old, "w-gone": old - 1})
    redis_client.hset(live_engine.keys.worker("w-silent"), mapping={
        "hostname": "h", "pid": 7, "queues": "mail", "concurrency": 4, "in_flight": 2, "processed": 25,
        "state": "running", "started_at": old - 60_000})
    by_id = {w["id"]: w for w in api.get("/api/v1/workers").json()["results"]}
    silent, gone = by_id["w-silent"], by_id["w-gone"]
    assert silent["alive"] is False and silent["state"] == "lost"
    assert silent["queues"] == ["mail"] and silent["processed"] == 25  # as it last reported
    assert gone["alive"] is False and gone["state"] == "lost"
    for field in ("hostname", "pid", "queues", "concurrency", "in_flight", "processed", "started_at"):
        assert gone[field] is None, field


def test_schedule_lists_delayed_tasks_by_due_time(api: APIClient, live_engine: Engine) -> None:
    late = live_engine.tasks.enqueue("dtq.echo", delay_seconds=120)
    soon = live_engine.tasks.enqueue("dtq.echo", queue="q2", delay_seconds=30)
    items = api.get("/api/v1/schedule").json()["results"]
    assert [i["task_id"] for i in items] == [soon.id, late.id]
    assert items[0]["kind"] == "delayed" and items[0]["queue"] == "q2" and 25 < items[0]["due_in_s"] <= 30
    page = api.get("/api/v1/schedule?limit=1").json()
    assert [i["task_id"] for i in page["results"]] == [soon.id]
    assert [i["task_id"] for i in api.get(page["next"]).json()["results"]] == [late.id]
    assert_error(api.get("/api/v1/schedule?cursor=x1"), 400, "VALIDATION_ERROR")


def test_the_schedule_merges_every_partition_in_due_order(api: APIClient, live_engine: Engine, settings: Any) -> None:
    from dtq_core.conf import get_engine

    settings.DTQ = {**settings.DTQ, "QUEUE_PARTITIONS": "wide=4"}
    engine = get_engine()
    tasks = [engine.tasks.enqueue("dtq.echo", queue="wide", delay_seconds=60 + i % 2) for i in range(12)]
    shown: list[str] = []
    url: str | None = "/api/v1/schedule?limit=5"
    while url:
        body = api.get(url).json()
        shown += [i["task_id"] for i in body["results"]]
        url = body["next"]
    assert sorted(shown) == sorted(t.id for t in tasks)  # each once
    due = {i["task_id"]: i["due_at"] for i in api.get("/api/v1/schedule?limit=100").json()["results"]}
    assert shown == sorted(shown, key=lambda task_id: (due[task_id], task_id))


def test_reads_answer_503_when_redis_is_down(settings: Any) -> None:
    api = APIClient()
    for path in ("/api/v1/audit", "/api/v1/workers", "/api/v1/schedule", f"/api/v1/tasks/abc123-{'0' * 32}"):
        assert_error(api.get(path), 503, "REDIS_UNAVAILABLE")
    assert api.get("/health").status_code == 200
    assert_error(api.get("/ready"), 503, "REDIS_UNAVAILABLE")


# -- probes, schema, browsable API, fallbacks ---------------------------------------------------

def test_probes_refuse_other_methods_with_the_envelope(api: APIClient) -> None:
    assert api.get("/ready").json() == {"status": "ready"}
    for path in ("/health", "/ready"):
        assert_error(api.post(path), 405, "METHOD_NOT_ALLOWED")


def test_the_openapi_schema_is_valid_and_names_every_endpoint(api: APIClient) -> None:
    response = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = response.json() if response["Content-Type"].startswith("application/vnd.oai.openapi+json") \
        else yaml.safe_load(response.content)
    validate_schema(schema)
    paths = set(schema["paths"])
    for path in ("/api/v1/tasks", "/api/v1/tasks/batch", "/api/v1/tasks/{task_id}", "/api/v1/tasks/{task_id}/cancel",
                 "/api/v1/queues", "/api/v1/queues/{queue}", "/api/v1/queues/{queue}/pause",
                 "/api/v1/queues/{queue}/resume", "/api/v1/queues/{queue}/purge", "/api/v1/queues/{queue}/delete",
                 "/api/v1/dlq",
                 "/api/v1/dlq/{entry_id}", "/api/v1/dlq/{entry_id}/retry", "/api/v1/dlq/{entry_id}/discard",
                 "/api/v1/dlq/retry", "/api/v1/dlq/discard", "/api/v1/audit", "/api/v1/workers",
                 "/api/v1/schedule"):
        assert path in paths, path
    assert schema["components"]["securitySchemes"]["ApiKeyAuth"] == {"type": "apiKey", "in": "header",
                                                                      "name": "X-API-Key"}


def test_the_api_is_browsable_in_a_browser(api: APIClient, live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo")
    for path in ("/api/v1/tasks", "/api/v1/queues", "/api/v1/dlq", "/api/v1/queues/default"):
        response = api.get(path, HTTP_ACCEPT="text/html")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
        assert b"Django REST framework" in response.content
    error = api.get("/api/v1/tasks/missing", HTTP_ACCEPT="text/html")
    assert error.status_code == 404 and b"TASK_NOT_FOUND" in error.content


@pytest.mark.parametrize("debug", [True, False])
def test_unknown_api_routes_get_the_envelope_with_debug_on_and_off(settings: Any, debug: bool) -> None:
    settings.DEBUG = debug
    client = Client()
    for path in ("/api/v1/nothing", "/api/v2/tasks", "/api/", "/api/v1/tasks/a/b/c"):
        response = client.get(path)
        assert response.status_code == 404 and response["Content-Type"] == "application/json", path
        assert response.json()["error"]["code"] == "NOT_FOUND"
        assert response.json()["error"]["request_id"] == response["X-Request-ID"]


@pytest.mark.parametrize("method", ["post", "put", "patch", "delete", "options", "head"])
def test_unknown_api_routes_get_the_envelope_for_every_method(method: str) -> None:
    # A POST used to get Django's HTML "CSRF verification failed" page instead: the catch-all
    # changes nothing, so there is nothing for CSRF to protect. A browser with cookies included.
    client = Client(enforce_csrf_checks=True)
    client.cookies["csrftoken"] = "x" * 32
    client.cookies["sessionid"] = "stale"
    for path in ("/api/v1/nothing", "/api/v1/tasks/a/b/c", "/api/"):
        if method == "head":
            response = client.head(path)
        else:
            response = getattr(client, method)(path, "{}", content_type="application/json")
        assert response.status_code == 404 and response["Content-Type"] == "application/json", (path, method)
        if method != "head":
            error = response.json()["error"]
            assert error["code"] == "NOT_FOUND" and path in error["message"]
            assert error["request_id"] == response["X-Request-ID"]


# -- the API's index and its interactive docs ---------------------------------------------------

def test_the_api_root_is_an_index_of_every_endpoint_with_its_methods(api: APIClient) -> None:
    for path in ("/api/v1/", "/api/v1"):
        response = api.get(path)
        assert response.status_code == 200 and response["Content-Type"] == "application/json", path
    index = response.json()
    assert index["schema"].endswith("/api/schema/") and index["docs"].endswith("/api/docs/")
    by_path = {e["path"]: e for e in index["endpoints"]}
    assert by_path["/api/v1/tasks"]["methods"] == ["GET", "POST"]
    assert by_path["/api/v1/tasks/{task_id}/cancel"]["methods"] == ["POST"]
    assert "/api/v1/periodic/{name}/trigger" in by_path and "/api/v1/dlq/retry" in by_path
    # Every operation the schema documents is in the index, and the other way round.
    schema = yaml.safe_load(api.get("/api/schema/").content)
    documented = {(p, m.upper()) for p, ops in schema["paths"].items() for m in ops if p.startswith("/api/v1/")}
    indexed = {(e["path"], m) for e in index["endpoints"] for m in e["methods"]}
    assert documented == indexed


def test_the_api_index_refuses_writes_with_the_envelope(api: APIClient) -> None:
    response = api.post("/api/v1/", {}, format="json")
    assert response.status_code == 405 and response["Allow"] == "GET, HEAD"
    assert response.json()["error"]["code"] == "METHOD_NOT_ALLOWED"


def test_the_interactive_api_docs_are_served_without_a_cdn(api: APIClient) -> None:
    response = api.get("/api/docs/")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js" in page
    assert "/api/schema/" in page and "https://" not in page
    bundle = Client().get("/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui-bundle.js")
    assert bundle.status_code == 200  # served by the app itself (whitenoise), as make run serves it
