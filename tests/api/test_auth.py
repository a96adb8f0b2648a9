"""Destructive operations: X-API-Key (401/403, constant-time compare), staff sessions with CSRF,
the open default, who the audit stream names, and the start-up warning when it is open."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import pytest
import redis
from django.contrib.auth.models import User
from django.core.checks import run_checks
from rest_framework.test import APIClient

from dtq_core.engine import Engine

from .support import make_dead_letters

KEY = "s3cret-key-0123456789abcdef"
FINGERPRINT = "api-key:" + hashlib.sha256(KEY.encode()).hexdigest()[:8]


@pytest.fixture
def keyed(settings: Any, live_engine: Engine) -> Engine:
    settings.DTQ = {**settings.DTQ, "API_KEY": KEY}
    from dtq_core.engine import get_engine

    return get_engine()


def destructive_calls(engine: Engine) -> list[tuple[str, Any]]:
    """Every destructive endpoint, pointed at something that exists so only auth can refuse it."""
    [dead] = make_dead_letters(engine, 1)
    entry = engine.get_task(dead)["dlq_entry_id"]
    task = engine.enqueue("dtq.echo", queue="q").id
    return [
        (f"/api/v1/tasks/{task}/cancel", None), ("/api/v1/queues/q/pause", None), ("/api/v1/queues/q/resume", None),
        ("/api/v1/queues/q/purge", None), (f"/api/v1/dlq/{entry}/retry", None), (f"/api/v1/dlq/{entry}/discard", None),
        ("/api/v1/dlq/retry", {"all": True}), ("/api/v1/dlq/discard", {"all": True}),
    ]


def call(client: APIClient, path: str, body: Any, **headers: str) -> Any:
    if body is None:
        return client.post(path, headers=headers)
    return client.post(path, json.dumps(body), content_type="application/json", headers=headers)


def assert_error(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.content
    assert response.json()["error"]["code"] == code


def test_with_a_key_set_every_destructive_call_needs_it(keyed: Engine) -> None:
    client = APIClient()
    for path, body in destructive_calls(keyed):
        assert_error(call(client, path, body), 401, "API_KEY_REQUIRED")
        assert_error(call(client, path, body, **{"X-API-Key": "wrong"}), 403, "API_KEY_INVALID")
        assert_error(call(client, path, body, **{"X-API-Key": ""}), 403, "API_KEY_INVALID")
        assert_error(call(client, path, body, **{"X-API-Key": KEY + "x"}), 403, "API_KEY_INVALID")
    assert keyed.audit_list().items == []  # refused calls change nothing and audit nothing
    assert keyed.queue_detail("q")["waiting"] == 1 and keyed.dlq_count() == 1


def test_the_right_key_is_accepted_and_audited_by_fingerprint(keyed: Engine, redis_client: redis.Redis) -> None:
    client = APIClient()
    calls = destructive_calls(keyed)
    for path, body in calls:
        response = call(client, path, body, **{"X-API-Key": KEY})
        assert response.status_code in (200, 202, 404), (path, response.content)  # 404: already discarded
    entries = keyed.audit_list().items
    assert len(entries) >= 6 and {e["actor"] for e in entries} == {FINGERPRINT}
    assert {e["source"] for e in entries} == {"api"} and all(e["request_id"] for e in entries)
    raw = json.dumps(redis_client.xrange(keyed.keys.audit()))
    assert KEY not in raw  # the raw key is never stored


def test_reads_and_submit_stay_open_with_a_key_set_even_with_a_wrong_header(keyed: Engine) -> None:
    client = APIClient()
    for headers in ({}, {"X-API-Key": "wrong"}):
        assert client.get("/api/v1/queues", headers=headers).status_code == 200
        assert client.get("/api/v1/dlq", headers=headers).status_code == 200
        assert client.post("/api/v1/tasks", {"type": "dtq.echo"}, format="json", headers=headers).status_code == 201
        assert client.post("/api/v1/tasks/batch", {"tasks": []}, format="json", headers=headers).status_code == 200


@pytest.fixture
def staff(db: Any) -> User:
    return User.objects.create_user("ops", password="pw-ops-123456", is_staff=True)


def csrf_client(user: User | None) -> tuple[APIClient, str]:
    client = APIClient(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    client.get("/api/v1/queues", HTTP_ACCEPT="text/html")  # the browsable page sets the CSRF cookie
    return client, client.cookies["csrftoken"].value


def test_a_staff_session_with_csrf_needs_no_key_and_is_audited_by_name(keyed: Engine, staff: User) -> None:
    keyed.enqueue("dtq.echo", queue="q")
    client, token = csrf_client(staff)
    response = client.post("/api/v1/queues/q/pause", headers={"X-CSRFToken": token})
    assert response.status_code == 200 and response.json()["paused"] is True
    entry = keyed.audit_list(limit=1).items[0]
    assert entry["actor"] == "user:ops" and entry["source"] == "api"


def test_a_staff_session_without_csrf_is_refused(keyed: Engine, staff: User) -> None:
    keyed.enqueue("dtq.echo", queue="q")
    client, _ = csrf_client(staff)
    response = client.post("/api/v1/queues/q/pause")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]
    assert keyed.queue_detail("q")["paused"] is False


def test_a_non_staff_session_still_needs_the_key(keyed: Engine, db: Any) -> None:
    keyed.enqueue("dtq.echo", queue="q")
    user = User.objects.create_user("viewer", password="pw-viewer-123456")
    client, token = csrf_client(user)
    assert_error(client.post("/api/v1/queues/q/pause", headers={"X-CSRFToken": token}), 401, "API_KEY_REQUIRED")


def test_without_a_key_destructive_calls_are_open_and_audited_as_anonymous(live_engine: Engine) -> None:
    client = APIClient()
    for path, body in destructive_calls(live_engine)[:5]:
        assert call(client, path, body).status_code in (200, 202)
    assert {e["actor"] for e in live_engine.audit_list().items} == {"api:anonymous"}


def test_without_a_key_a_staff_session_is_audited_by_name(live_engine: Engine, staff: User) -> None:
    live_engine.enqueue("dtq.echo", queue="q")
    client, token = csrf_client(staff)
    assert client.post("/api/v1/queues/q/purge", headers={"X-CSRFToken": token}).json()["count"] == 1
    assert live_engine.audit_list(limit=1).items[0]["actor"] == "user:ops"


def test_a_401_names_the_header_scheme(keyed: Engine) -> None:
    keyed.enqueue("dtq.echo", queue="q")
    response = APIClient().post("/api/v1/queues/q/pause")
    assert response.status_code == 401 and "X-API-Key" in response.json()["error"]["message"]
    assert response["WWW-Authenticate"].startswith("X-API-Key")


@pytest.mark.parametrize(("debug", "key", "warned"), [(False, "", True), (False, "k", False), (True, "", False)])
def test_a_system_check_warns_when_destructive_operations_are_open(
        settings: Any, debug: bool, key: str, warned: bool) -> None:
    settings.DEBUG = debug
    settings.DTQ = {**settings.DTQ, "API_KEY": key}
    ids = [m.id for m in run_checks(tags=["security"])]
    assert ("dtq.W001" in ids) is warned


@pytest.mark.parametrize(("key", "warned"), [("", True), ("k", False)])
def test_the_web_process_logs_the_open_destructive_operations_warning(
        settings: Any, caplog: pytest.LogCaptureFixture, key: str, warned: bool) -> None:
    # daphne runs no system checks: the ASGI entry point logs dtq's own at start instead.
    from dtq_site.handlers import log_dtq_checks

    settings.DEBUG = False
    settings.DTQ = {**settings.DTQ, "API_KEY": key}
    with caplog.at_level(logging.WARNING, logger="dtq.site"):
        log_dtq_checks()
    assert any("dtq.W001" in r.getMessage() for r in caplog.records) is warned
