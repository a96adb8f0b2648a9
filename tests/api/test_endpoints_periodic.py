"""GET/POST /api/v1/periodic, GET/PATCH/DELETE /api/v1/periodic/<name>, POST .../pause|resume|trigger,
and GET /api/v1/tasks?periodic_name=: the contract's envelope on malformed, oversized and unknown
input, 503 with Redis down, every change audited."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from ..redis_server import RedisServer
from .support import assert_error, drain

NIGHTLY = {"name": "report.nightly", "type": "dtq.echo", "payload": {"report": "sales"}, "cron": "0 3 * * *",
           "timezone": "Europe/Berlin", "queue": "reports", "priority": "low"}


def create(api: APIClient, **overrides: Any) -> Any:
    return api.post("/api/v1/periodic", {**NIGHTLY, **overrides}, format="json")


def audit_of(engine: Engine, name: str) -> list[tuple[str, str]]:
    """(action, actor) of the audit entries whose target names this periodic task, oldest first."""
    return [(e["action"], e["actor"]) for e in reversed(engine.audit.list(limit=500).items) if name in e["target"]]


def test_create_then_list_and_get_show_the_schedule_with_its_next_run_and_description(
        api: APIClient, live_engine: Engine) -> None:
    response = create(api)
    assert response.status_code == 201, response.content
    shown = response.json()
    assert {k: shown[k] for k in NIGHTLY} == NIGHTLY
    assert shown["every_seconds"] is None and shown["overlap"] == "allow" and shown["misfire"] == "skip"
    assert shown["paused"] is False and shown["source"] == "api" and shown["last_runs"] == []
    assert shown["next_run_at"].endswith("Z") and shown["description"] and "3" in shown["description"]
    assert api.get("/api/v1/periodic/report.nightly").json() == shown
    listed = api.get("/api/v1/periodic").json()["results"]
    assert [p["name"] for p in listed] == ["report.nightly"] and listed[0] == shown
    assert audit_of(live_engine, "report.nightly") == [("periodic.create", "api:anonymous")]


def test_an_interval_schedule_with_defaults(api: APIClient) -> None:
    response = api.post("/api/v1/periodic", {"name": "tick", "type": "dtq.echo", "every_seconds": 30}, format="json")
    assert response.status_code == 201, response.content
    shown = response.json()
    assert shown["cron"] is None and shown["every_seconds"] == 30 and shown["queue"] == "default"
    assert shown["priority"] == "normal" and shown["timezone"] == "UTC" and "30" in shown["description"]


def test_a_name_taken_is_409_and_changes_nothing(api: APIClient) -> None:
    first = create(api).json()
    assert_error(create(api, cron="*/5 * * * *"), 409, "PERIODIC_EXISTS")
    assert api.get("/api/v1/periodic/report.nightly").json()["cron"] == first["cron"]


@pytest.mark.parametrize("body", [
    [], "x", 42, None,                                       # not an object
    {"type": "dtq.echo", "cron": "* * * * *"},              # no name
    {"name": "n", "cron": "* * * * *"},                     # no type
    {"name": "n", "type": "dtq.echo"},                      # no schedule
    {"name": "n", "type": "dtq.echo", "cron": "* * * * *", "every_seconds": 5},   # two schedules
    {"name": "n", "type": "dtq.echo", "cron": "61 * * * *"},
    {"name": "n", "type": "dtq.echo", "cron": "not cron"},
    {"name": "n", "type": "dtq.echo", "cron": "* * * * *", "timezone": "Mars/Olympus"},
    {"name": "n", "type": "dtq.echo", "every_seconds": 0},
    {"name": "n", "type": "dtq.echo", "every_seconds": -1},
    {"name": "n", "type": "dtq.echo", "every_seconds": "often"},
    {"name": "n", "type": "dtq.echo", "every_seconds": 5, "overlap": "sometimes"},
    {"name": "n", "type": "dtq.echo", "every_seconds": 5, "misfire": "all"},
    {"name": "n", "type": "dtq.echo", "every_seconds": 5, "queue": "Not A Queue"},
    {"name": "n", "type": "dtq.echo", "every_seconds": 5, "priority": "urgent"},
    {"name": "n", "type": 7, "every_seconds": 5},
    {"name": ["n"], "type": "dtq.echo", "every_seconds": 5},
    {"name": "has space", "type": "dtq.echo", "every_seconds": 5},
    {"name": "a/b", "type": "dtq.echo", "every_seconds": 5},
    {"name": "", "type": "dtq.echo", "every_seconds": 5},
    {"name": "n", "type": "dtq.echo", "every_seconds": 5, "colour": "red"},   # unknown field
    {"name": "n", "type": "dtq.echo", "every_seconds": 5, "source": "code"},  # not the caller's to say
])
def test_malformed_bodies_are_400_validation_errors_and_create_nothing(api: APIClient, live_engine: Engine,
                                                                       body: Any) -> None:
    response = api.post("/api/v1/periodic", json.dumps(body), content_type="application/json")
    assert_error(response, 400, "VALIDATION_ERROR")
    assert api.get("/api/v1/periodic").json()["results"] == []
    assert live_engine.audit.list().items == []


def test_a_body_that_is_not_json_is_400_malformed_json(api: APIClient) -> None:
    assert_error(api.post("/api/v1/periodic", "{nope", content_type="application/json"), 400, "MALFORMED_JSON")
    assert_error(api.patch("/api/v1/periodic/x", "{nope", content_type="application/json"), 400, "MALFORMED_JSON")


def test_oversized_input_is_refused(api: APIClient, settings: Any) -> None:
    error = assert_error(create(api, name="n" * 201), 400, "VALIDATION_ERROR")
    assert "name" in error["message"]
    settings.DTQ = {**settings.DTQ, "PAYLOAD_MAX_BYTES": 1000}
    assert_error(create(api, payload={"blob": "x" * 2000}), 413, "PAYLOAD_TOO_LARGE")
    huge = json.dumps({**NIGHTLY, "payload": "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    assert_error(api.post("/api/v1/periodic", huge, content_type="application/json"), 413, "PAYLOAD_TOO_LARGE")
    assert api.get("/api/v1/periodic").json()["results"] == []
    assert_error(api.get("/api/v1/periodic/" + "n" * 5000), 404, "PERIODIC_NOT_FOUND")


def test_patch_changes_only_the_fields_given_and_is_audited(api: APIClient, live_engine: Engine) -> None:
    before = create(api).json()
    response = api.patch("/api/v1/periodic/report.nightly", {"cron": "30 4 * * 1-5", "payload": [1]}, format="json")
    assert response.status_code == 200, response.content
    after = response.json()
    assert after["cron"] == "30 4 * * 1-5" and after["payload"] == [1] and after["queue"] == "reports"
    assert after["timezone"] == "Europe/Berlin" and after["description"] != before["description"]
    assert after["next_run_at"] != before["next_run_at"]
    assert api.get("/api/v1/periodic/report.nightly").json() == after
    assert [a for a, _ in audit_of(live_engine, "report.nightly")] == ["periodic.create", "periodic.update"]
    switched = api.patch("/api/v1/periodic/report.nightly", {"cron": None, "timezone": "UTC", "every_seconds": 60},
                         format="json")
    assert switched.status_code == 200, switched.content
    assert switched.json()["cron"] is None and switched.json()["every_seconds"] == 60


@pytest.mark.parametrize("body", [{}, [], {"name": "renamed"}, {"colour": "red"}, {"cron": "99 * * * *"},
                                  {"overlap": "never"}, {"every_seconds": "x"}])
def test_bad_patches_are_400_and_change_nothing(api: APIClient, body: Any) -> None:
    before = create(api).json()
    response = api.patch("/api/v1/periodic/report.nightly", json.dumps(body), content_type="application/json")
    assert_error(response, 400, "VALIDATION_ERROR")
    assert api.get("/api/v1/periodic/report.nightly").json() == before


def test_a_patch_that_keeps_losing_to_other_changes_is_409_periodic_conflict_and_changes_nothing(
        api: APIClient, live_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    before = create(api).json()
    load = live_engine.periodic._load

    def overtaken(name: str) -> Any:  # another process changes it right after every read
        stored = load(name)
        live_engine.client.hincrby(live_engine.keys.periodic(stored.tag, name), "rev", 1)
        return stored

    monkeypatch.setattr(live_engine.periodic, "_load", overtaken)
    assert_error(api.patch("/api/v1/periodic/report.nightly", {"payload": [1]}, format="json"), 409,
                 "PERIODIC_CONFLICT")
    assert_error(api.post("/api/v1/periodic/report.nightly/pause"), 409, "PERIODIC_CONFLICT")
    monkeypatch.undo()
    assert api.get("/api/v1/periodic/report.nightly").json() == before
    assert audit_of(live_engine, "report.nightly") == [("periodic.create", "api:anonymous")]


def test_pause_and_resume_are_audited_and_a_paused_schedule_has_no_next_run(
        api: APIClient, live_engine: Engine) -> None:
    create(api)
    paused = api.post("/api/v1/periodic/report.nightly/pause")
    assert paused.status_code == 200 and paused.json()["paused"] is True and paused.json()["next_run_at"] is None
    assert api.get("/api/v1/periodic").json()["results"][0]["paused"] is True
    resumed = api.post("/api/v1/periodic/report.nightly/resume")
    assert resumed.status_code == 200 and resumed.json()["paused"] is False
    assert resumed.json()["next_run_at"].endswith("Z")
    actions = [a for a, _ in audit_of(live_engine, "report.nightly")]
    assert actions == ["periodic.create", "periodic.pause", "periodic.resume"]


def test_trigger_fires_one_task_now_that_carries_the_name_and_the_tasks_filter_finds(
        api: APIClient, live_engine: Engine) -> None:
    created = create(api).json()
    other = api.post("/api/v1/periodic", {"name": "other", "type": "dtq.echo", "every_seconds": 3600},
                     format="json")
    assert other.status_code == 201
    response = api.post("/api/v1/periodic/report.nightly/trigger")
    assert response.status_code == 201, response.content
    fired = response.json()
    assert fired["name"] == "report.nightly"
    task = api.get(f"/api/v1/tasks/{fired['task_id']}").json()
    assert task["periodic_name"] == "report.nightly" and task["scheduled_for"].endswith("Z")
    assert task["type"] == "dtq.echo" and task["queue"] == "reports" and task["payload"] == {"report": "sales"}
    shown = api.get("/api/v1/periodic/report.nightly").json()
    assert shown["next_run_at"] == created["next_run_at"]  # not a tick
    [run] = shown["last_runs"]
    assert run["task_id"] == fired["task_id"] and run["kind"] == "trigger"
    assert run["scheduled_for"] == fired["scheduled_for"] == task["scheduled_for"]
    api.post("/api/v1/periodic/other/trigger")
    listed = api.get("/api/v1/tasks", {"periodic_name": "report.nightly"}).json()["results"]
    assert [t["id"] for t in listed] == [fired["task_id"]]
    assert api.get("/api/v1/tasks", {"periodic_name": "nobody"}).json()["results"] == []
    assert_error(api.get("/api/v1/tasks", {"periodic_name": "x" * 201}), 400, "VALIDATION_ERROR")
    drain(live_engine.config, queues=["reports"])
    assert api.get(f"/api/v1/tasks/{fired['task_id']}").json()["status"] == "SUCCEEDED"
    assert ("periodic.trigger", "api:anonymous") in audit_of(live_engine, "report.nightly")


def test_delete_removes_it_once_and_is_audited(api: APIClient, live_engine: Engine) -> None:
    create(api)
    response = api.delete("/api/v1/periodic/report.nightly")
    assert response.status_code == 200 and response.json() == {"name": "report.nightly", "deleted": True}
    assert_error(api.get("/api/v1/periodic/report.nightly"), 404, "PERIODIC_NOT_FOUND")
    assert api.get("/api/v1/periodic").json()["results"] == []
    assert_error(api.delete("/api/v1/periodic/report.nightly"), 404, "PERIODIC_NOT_FOUND")
    assert audit_of(live_engine, "report.nightly")[-1] == ("periodic.delete", "api:anonymous")
    assert create(api).status_code == 201  # the name is free again


@pytest.mark.parametrize("name", ["nope", "UPPER.case.unknown", "a" * 300])
def test_an_unknown_name_is_404_everywhere_and_audits_nothing(api: APIClient, live_engine: Engine,
                                                              name: str) -> None:
    base = f"/api/v1/periodic/{name}"
    assert_error(api.get(base), 404, "PERIODIC_NOT_FOUND")
    assert_error(api.patch(base, {"every_seconds": 5}, format="json"), 404, "PERIODIC_NOT_FOUND")
    assert_error(api.delete(base), 404, "PERIODIC_NOT_FOUND")
    for action in ("pause", "resume", "trigger"):
        assert_error(api.post(f"{base}/{action}"), 404, "PERIODIC_NOT_FOUND")
    assert live_engine.audit.list().items == []


def test_wrong_methods_are_405(api: APIClient, live_engine: Engine) -> None:
    create(api)
    assert_error(api.put("/api/v1/periodic/report.nightly", NIGHTLY, format="json"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.delete("/api/v1/periodic"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.get("/api/v1/periodic/report.nightly/pause"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.get("/api/v1/periodic/report.nightly/trigger"), 405, "METHOD_NOT_ALLOWED")


def test_periodic_endpoints_answer_503_when_redis_is_down() -> None:
    api = APIClient()
    base = "/api/v1/periodic/report.nightly"
    for response in (api.get("/api/v1/periodic"), create(api), api.get(base),
                     api.patch(base, {"every_seconds": 5}, format="json"), api.delete(base),
                     api.post(base + "/pause"), api.post(base + "/resume"), api.post(base + "/trigger"),
                     api.get("/api/v1/tasks", {"periodic_name": "report.nightly"})):
        assert_error(response, 503, "REDIS_UNAVAILABLE")


def test_a_frozen_redis_gives_503_within_2_seconds(frozen_redis: RedisServer) -> None:
    api = APIClient()
    for call in (lambda: api.get("/api/v1/periodic"), lambda: api.post("/api/v1/periodic/x/trigger"),
                 lambda: create(api)):
        started = time.monotonic()
        assert_error(call(), 503, "REDIS_UNAVAILABLE")
        assert time.monotonic() - started < 2


def test_the_schema_names_the_periodic_endpoints(api: APIClient) -> None:
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    paths = schema["paths"]
    assert set(paths["/api/v1/periodic"]) >= {"get", "post"}
    assert set(paths["/api/v1/periodic/{name}"]) >= {"get", "patch", "delete"}
    for action in ("pause", "resume", "trigger"):
        assert "post" in paths[f"/api/v1/periodic/{{name}}/{action}"]
    params = {p["name"] for p in paths["/api/v1/tasks"]["get"]["parameters"]}
    assert "periodic_name" in params


def test_a_schedule_declared_in_code_is_operated_not_changed_at_run_time(api: APIClient, live_engine: Engine) -> None:
    from dtq_core.engine.periodic import PeriodicSpec

    live_engine.periodic.sync_declared([PeriodicSpec(name="declared", type="dtq.echo", every_seconds=60)])
    assert api.get("/api/v1/periodic/declared").json()["source"] == "code"
    error = assert_error(api.patch("/api/v1/periodic/declared", {"every_seconds": 5}, format="json"), 409,
                         "PERIODIC_DECLARED_IN_CODE")
    assert "code" in error["message"]
    assert_error(api.delete("/api/v1/periodic/declared"), 409, "PERIODIC_DECLARED_IN_CODE")
    assert api.post("/api/v1/periodic/declared/pause").json()["paused"] is True
    assert api.post("/api/v1/periodic/declared/resume").json()["paused"] is False
    assert api.get("/api/v1/periodic/declared").json()["every_seconds"] == 60


def test_the_periodic_endpoints_are_browsable(api: APIClient, db: Any) -> None:
    from django.contrib.auth.models import User

    create(api)
    client = APIClient()
    for logged_in in (False, True):  # a superuser's page also renders the forms of the changing methods
        if logged_in:
            client.force_login(User.objects.create_superuser("root", password="pw-root-123456"))
        for path in ("/api/v1/periodic", "/api/v1/periodic/report.nightly"):
            response = client.get(path, HTTP_ACCEPT="text/html")
            assert response.status_code == 200 and response["Content-Type"].startswith("text/html"), path
            assert b"report.nightly" in response.content


def test_a_queue_a_schedule_fires_into_is_not_deleted(api: APIClient, live_engine: Engine) -> None:
    create(api)  # into "reports", which it registers
    error = assert_error(api.post("/api/v1/queues/reports/delete"), 409, "QUEUE_NOT_EMPTY")
    assert "report.nightly" in error["message"]
    api.patch("/api/v1/periodic/report.nightly", {"queue": "default"}, format="json")  # moved: no longer held
    assert api.post("/api/v1/queues/reports/delete").json() == {"queue": "reports", "deleted": True}
    assert api.get("/api/v1/periodic/report.nightly").json()["queue"] == "default"
