"""Who may change periodic tasks through the API: the same policy as every destructive endpoint
(X-API-Key, or a staff session with CSRF and the console's permission), reads stay open."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec

from .test_auth import FINGERPRINT, KEY, assert_error, csrf_client

BODY = {"name": "made", "type": "dtq.echo", "every_seconds": 60}


@pytest.fixture(autouse=True)
def script_admin() -> None:
    """Overrides tests/api/conftest.py's opt-in: the default policy (closed) is under test."""


@pytest.fixture
def keyed(settings: Any, live_engine: Engine) -> Engine:
    settings.DTQ = {**settings.DTQ, "API_KEY": KEY}
    from dtq_core.conf import get_engine

    engine = get_engine()
    engine.periodic.create(PeriodicSpec(name="nightly", type="dtq.echo", cron="0 3 * * *"), actor=Actor.cli())
    return engine


def changing_calls() -> list[tuple[str, str, Any, str]]:
    """(method, path, body, console permission) of every changing periodic endpoint."""
    return [("post", "/api/v1/periodic", BODY, "change_periodic"),
            ("patch", "/api/v1/periodic/nightly", {"cron": "0 4 * * *"}, "change_periodic"),
            ("post", "/api/v1/periodic/nightly/pause", None, "operate_periodic"),
            ("post", "/api/v1/periodic/nightly/resume", None, "operate_periodic"),
            ("post", "/api/v1/periodic/nightly/trigger", None, "operate_periodic"),
            ("delete", "/api/v1/periodic/nightly", None, "change_periodic")]


def call(client: APIClient, method: str, path: str, body: Any, **headers: str) -> Any:
    return getattr(client, method)(path, body, format="json", headers=headers)


def untouched(engine: Engine, audited: int = 1) -> bool:
    shown = engine.periodic.get("nightly")
    return (shown["cron"] == "0 3 * * *" and shown["paused"] is False and shown["last_runs"] == []
            and [p["name"] for p in engine.periodic.list()] == ["nightly"]
            and len(engine.audit.list().items) == audited)


def test_with_a_key_set_every_change_needs_it_and_reads_stay_open(keyed: Engine) -> None:
    client = APIClient()
    for method, path, body, _ in changing_calls():
        assert_error(call(client, method, path, body), 401, "API_KEY_REQUIRED")
        assert_error(call(client, method, path, body, **{"X-API-Key": "wrong"}), 403, "API_KEY_INVALID")
    assert untouched(keyed)  # only the setup's create is audited
    for headers in ({}, {"X-API-Key": "wrong"}):
        assert client.get("/api/v1/periodic", headers=headers).status_code == 200
        assert client.get("/api/v1/periodic/nightly", headers=headers).status_code == 200


def test_the_right_key_does_everything_audited_by_fingerprint(keyed: Engine) -> None:
    client = APIClient()
    for method, path, body, _ in changing_calls():
        response = call(client, method, path, body, **{"X-API-Key": KEY})
        assert response.status_code in (200, 201), (path, response.content)
    entries = keyed.audit.list().items[:-1]  # all but the setup's
    assert len(entries) == len(changing_calls()) and {e["actor"] for e in entries} == {FINGERPRINT}


def test_anonymous_changes_are_refused_by_default(live_engine: Engine) -> None:
    live_engine.periodic.create(PeriodicSpec(name="nightly", type="dtq.echo", cron="0 3 * * *"), actor=Actor.cli())
    for method, path, body, _ in changing_calls():
        assert_error(call(APIClient(), method, path, body), 401, "AUTHENTICATION_REQUIRED")
    assert untouched(live_engine)


@pytest.fixture
def readonly_staff(db: Any) -> User:
    return User.objects.create_user("viewer", password="pw-viewer-123456", is_staff=True)


def test_a_staff_session_needs_the_permission_of_each_change(keyed: Engine, readonly_staff: User) -> None:
    client, token = csrf_client(readonly_staff)
    for method, path, body, codename in changing_calls():
        error = call(client, method, path, body, **{"X-CSRFToken": token}).json()["error"]
        assert error["code"] == "PERMISSION_DENIED" and f"dtq_dashboard.{codename}" in error["message"], path
    assert untouched(keyed)
    # Operating (pause, resume, trigger) does not allow changing or deleting.
    readonly_staff.user_permissions.add(Permission.objects.get(codename="operate_periodic"))
    for method, path, body, codename in changing_calls():
        response = call(client, method, path, body, **{"X-CSRFToken": token})
        if codename == "operate_periodic":
            assert response.status_code in (200, 201), (path, response.content)
        else:
            assert_error(response, 403, "PERMISSION_DENIED")
    readonly_staff.user_permissions.add(Permission.objects.get(codename="change_periodic"))
    client, token = csrf_client(readonly_staff)  # a fresh session: Django caches permissions per user object
    for method, path, body, _ in changing_calls():
        response = call(client, method, path, body, **{"X-CSRFToken": token})
        assert response.status_code in (200, 201), (path, response.content)
    assert {e["actor"] for e in keyed.audit.list().items[:-1]} == {"user:viewer"}


def test_a_staff_session_without_csrf_is_refused(keyed: Engine, db: Any) -> None:
    client, _ = csrf_client(User.objects.create_superuser("root", password="pw-root-123456"))
    response = client.post("/api/v1/periodic/nightly/pause")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]
    assert untouched(keyed)
