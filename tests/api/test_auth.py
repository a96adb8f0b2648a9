"""Destructive operations: X-API-Key (401/403, constant-time compare), staff sessions with CSRF and
the console's named permissions, closed to anonymous callers unless DTQ_ALLOW_ANONYMOUS_ADMIN,
never cross-site, who the audit stream names, and the start-up warning when it is open."""

from __future__ import annotations

import hashlib
import json
import logging
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission, User
from django.core.checks import run_checks
from django.test import Client
from rest_framework.test import APIClient

from dtq_core.config import ConfigError, read_env
from dtq_core.engine import Engine

from .support import make_dead_letters

KEY = "s3cret-key-0123456789abcdef"
FINGERPRINT = "api-key:" + hashlib.sha256(KEY.encode()).hexdigest()[:8]


@pytest.fixture(autouse=True)
def script_admin() -> None:
    """Overrides tests/api/conftest.py's opt-in: here the default (off) is under test."""


@pytest.fixture
def keyed(settings: Any, live_engine: Engine) -> Engine:
    settings.DTQ = {**settings.DTQ, "API_KEY": KEY}
    from dtq_core.conf import get_engine

    return get_engine()


def destructive_calls(engine: Engine) -> list[tuple[str, Any]]:
    """Every destructive endpoint, pointed at something that exists so only auth can refuse it."""
    return [(path, body) for path, body, _ in guarded_calls(engine)]


def guarded_calls(engine: Engine) -> list[tuple[str, Any, str]]:
    """Each destructive endpoint with the console permission that guards it."""
    [dead] = make_dead_letters(engine, 1)
    entry = engine.tasks.get(dead)["dlq_entry_id"]
    task = engine.tasks.enqueue("dtq.echo", queue="q").id
    workflow = engine.workflows.submit({"chain": [{"type": "dtq.echo", "queue": "wfq"}]})
    return [
        (f"/api/v1/workflows/{workflow}/cancel", None, "cancel_task"),
        (f"/api/v1/tasks/{task}/cancel", None, "cancel_task"), ("/api/v1/queues/q/pause", None, "pause_queue"),
        ("/api/v1/queues/q/resume", None, "pause_queue"), ("/api/v1/queues/q/purge", None, "purge_queue"),
        ("/api/v1/queues/q/delete", None, "purge_queue"),
        (f"/api/v1/dlq/{entry}/retry", None, "retry_deadletter"),
        (f"/api/v1/dlq/{entry}/discard", None, "discard_deadletter"),
        ("/api/v1/dlq/retry", {"all": True}, "retry_deadletter"),
        ("/api/v1/dlq/discard", {"all": True}, "discard_deadletter"),
    ]


def call(client: APIClient, path: str, body: Any, **headers: str) -> Any:
    if body is None:
        return client.post(path, headers=headers)
    return client.post(path, json.dumps(body), content_type="application/json", headers=headers)


def unchanged(engine: Engine) -> bool:
    """Nothing that a destructive call would change has changed, and nothing was audited."""
    detail = engine.queues.get("q")
    return (engine.audit.list().items == [] and detail["waiting"] == 1 and detail["paused"] is False
            and engine.dlq.count() == 1)


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
    assert keyed.audit.list().items == []  # refused calls change nothing and audit nothing
    assert keyed.queues.get("q")["waiting"] == 1 and keyed.dlq.count() == 1


def test_the_right_key_is_accepted_and_audited_by_fingerprint(keyed: Engine, redis_client: redis.Redis) -> None:
    client = APIClient()
    calls = destructive_calls(keyed)
    for path, body in calls:
        response = call(client, path, body, **{"X-API-Key": KEY})
        assert response.status_code in (200, 202, 404), (path, response.content)  # 404: already discarded
    entries = keyed.audit.list().items
    assert len(entries) >= 6 and {e["actor"] for e in entries} == {FINGERPRINT}
    assert {e["source"] for e in entries} == {"api"} and all(e["request_id"] for e in entries)
    raw = json.dumps(redis_client.xrange(keyed.keys.audit()))
    assert KEY not in raw  # the raw key is never stored


NON_ASCII_KEY = "clé-secrète-0123456789abcdef"


def as_the_server_gives_it(sent: bytes) -> str:
    """A header's bytes as Django gets them: WSGI and ASGI servers decode them as latin-1 (PEP 3333)."""
    return sent.decode("latin-1")


def test_the_right_non_ascii_key_is_accepted_as_the_utf_8_a_client_sends(settings: Any, live_engine: Engine) -> None:
    settings.DTQ = {**settings.DTQ, "API_KEY": NON_ASCII_KEY}
    from dtq_core.conf import get_engine
    engine = get_engine()
    engine.tasks.enqueue("dtq.echo", queue="q")
    for wrong in ("clé-secrète-0123456789abcdeX".encode(), NON_ASCII_KEY.encode("latin-1")):
        response = Client().post("/api/v1/queues/q/pause", HTTP_X_API_KEY=as_the_server_gives_it(wrong))
        assert response.status_code == 403, response.content
    # A str no server hands over (not latin-1) is a wrong key, not a 500.
    assert Client().post("/api/v1/queues/q/pause", HTTP_X_API_KEY="clé-€").status_code == 403
    response = Client().post("/api/v1/queues/q/pause", HTTP_X_API_KEY=as_the_server_gives_it(NON_ASCII_KEY.encode()))
    assert response.status_code == 200, response.content
    assert engine.queues.get("q")["paused"] is True


def test_reads_and_submit_stay_open_with_a_key_set_even_with_a_wrong_header(keyed: Engine) -> None:
    client = APIClient()
    for headers in ({}, {"X-API-Key": "wrong"}):
        assert client.get("/api/v1/queues", headers=headers).status_code == 200
        assert client.get("/api/v1/dlq", headers=headers).status_code == 200
        assert client.post("/api/v1/tasks", {"type": "dtq.echo"}, format="json", headers=headers).status_code == 201
        assert client.post("/api/v1/tasks/batch", {"tasks": []}, format="json", headers=headers).status_code == 200


@pytest.fixture
def staff(db: Any) -> User:
    """A staff operator holding every console permission (as the console's "operators" group)."""
    user = User.objects.create_user("ops", password="pw-ops-123456", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="dtq_dashboard"))
    return user


@pytest.fixture
def readonly_staff(db: Any) -> User:
    """A staff user with none of the console's permissions: the console lets them read only."""
    return User.objects.create_user("viewer", password="pw-viewer-123456", is_staff=True)


def csrf_client(user: User | None) -> tuple[APIClient, str]:
    client = APIClient(enforce_csrf_checks=True)
    if user is not None:
        client.force_login(user)
    client.get("/api/v1/queues", HTTP_ACCEPT="text/html")  # the browsable page sets the CSRF cookie
    return client, client.cookies["csrftoken"].value


def test_a_staff_session_with_csrf_needs_no_key_and_is_audited_by_name(keyed: Engine, staff: User) -> None:
    keyed.tasks.enqueue("dtq.echo", queue="q")
    client, token = csrf_client(staff)
    response = client.post("/api/v1/queues/q/pause", headers={"X-CSRFToken": token})
    assert response.status_code == 200 and response.json()["paused"] is True
    entry = keyed.audit.list(limit=1).items[0]
    assert entry["actor"] == "user:ops" and entry["source"] == "api"


def test_a_staff_session_without_csrf_is_refused(keyed: Engine, staff: User) -> None:
    keyed.tasks.enqueue("dtq.echo", queue="q")
    client, _ = csrf_client(staff)
    response = client.post("/api/v1/queues/q/pause")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]
    assert keyed.queues.get("q")["paused"] is False


@pytest.mark.parametrize("with_key", [False, True])
def test_a_staff_session_needs_the_console_permission_of_each_destructive_endpoint(
        settings: Any, live_engine: Engine, readonly_staff: User, with_key: bool) -> None:
    # A staff user the console shows no buttons to could do everything through the API.
    if with_key:
        settings.DTQ = {**settings.DTQ, "API_KEY": KEY}
    from dtq_core.conf import get_engine

    engine = get_engine()
    calls = guarded_calls(engine)
    client, token = csrf_client(readonly_staff)
    for path, body, codename in calls:
        error = call(client, path, body, **{"X-CSRFToken": token}).json()["error"]
        assert error["code"] == "PERMISSION_DENIED" and f"dtq_dashboard.{codename}" in error["message"], path
    assert unchanged(engine)
    for path, body, codename in calls:  # granted, each works (with the session and its CSRF token)
        readonly_staff.user_permissions.add(Permission.objects.get(codename=codename))
        response = call(client, path, body, **{"X-CSRFToken": token})
        assert response.status_code in (200, 202, 404), (path, response.content)  # 404: already retried
    entries = engine.audit.list().items
    assert len(entries) >= 6 and {e["actor"] for e in entries} == {"user:viewer"}


def test_a_staff_session_with_one_permission_gets_only_that_operation(live_engine: Engine,
                                                                      readonly_staff: User) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="q")
    readonly_staff.user_permissions.add(Permission.objects.get(codename="pause_queue"))
    client, token = csrf_client(readonly_staff)
    assert client.post("/api/v1/queues/q/pause", headers={"X-CSRFToken": token}).status_code == 200
    assert_error(client.post("/api/v1/queues/q/purge", headers={"X-CSRFToken": token}), 403, "PERMISSION_DENIED")
    assert live_engine.queues.get("q")["waiting"] == 1


def test_a_superuser_session_needs_no_named_permission(live_engine: Engine, db: Any) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="q")
    client, token = csrf_client(User.objects.create_superuser("root", password="pw-root-123456"))
    assert client.post("/api/v1/queues/q/purge", headers={"X-CSRFToken": token}).json()["count"] == 1
    assert live_engine.audit.list(limit=1).items[0]["actor"] == "user:root"


def test_a_non_staff_session_still_needs_the_key(keyed: Engine, db: Any) -> None:
    keyed.tasks.enqueue("dtq.echo", queue="q")
    user = User.objects.create_user("viewer", password="pw-viewer-123456")
    client, token = csrf_client(user)
    assert_error(client.post("/api/v1/queues/q/pause", headers={"X-CSRFToken": token}), 401, "API_KEY_REQUIRED")


def test_without_a_key_anonymous_destructive_calls_are_refused_by_default(live_engine: Engine) -> None:
    client = APIClient()
    for path, body in destructive_calls(live_engine):
        response = call(client, path, body)
        assert_error(response, 401, "AUTHENTICATION_REQUIRED")
        message = response.json()["error"]["message"]
        assert "staff session" in message and "DTQ_API_KEY" in message and "DTQ_ALLOW_ANONYMOUS_ADMIN" in message
        assert response["WWW-Authenticate"].startswith("X-API-Key")
    assert unchanged(live_engine)


def test_without_a_key_a_non_staff_session_is_refused(live_engine: Engine, db: Any) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="q")
    client, token = csrf_client(User.objects.create_user("viewer", password="pw-viewer-123456"))
    assert_error(client.post("/api/v1/queues/q/purge", headers={"X-CSRFToken": token}), 401,
                 "AUTHENTICATION_REQUIRED")
    assert live_engine.queues.get("q")["waiting"] == 1


def test_with_anonymous_admin_on_script_calls_are_open_and_audited_as_anonymous(
        live_engine: Engine, anonymous_admin: Any) -> None:
    client = APIClient()
    for path, body in destructive_calls(live_engine)[:5]:
        assert call(client, path, body).status_code in (200, 202)
    assert {e["actor"] for e in live_engine.audit.list().items} == {"api:anonymous"}


def cross_site_form_post(client: Client, path: str, **headers: str) -> Any:
    """What a page on another site makes a browser send: a form POST, no token, no key."""
    return client.post(path, "x=1", content_type="application/x-www-form-urlencoded", headers=headers)


@pytest.mark.parametrize("anonymous", [False, True])
@pytest.mark.parametrize("foreign", [{"Origin": "http://evil.example"}, {"Origin": "null"},
                                     {"Referer": "http://evil.example/page.html"},
                                     {"Origin": "http://testserver.evil.example"}])
def test_a_cross_site_form_post_changes_nothing(settings: Any, live_engine: Engine, foreign: dict[str, str],
                                                anonymous: bool) -> None:
    # The reported attack: any web page the operator opened paused and purged a queue.
    if anonymous:
        settings.DTQ = {**settings.DTQ, "ALLOW_ANONYMOUS_ADMIN": True}
    calls = destructive_calls(live_engine)
    client = Client(enforce_csrf_checks=True)
    for path, _ in calls:
        response = cross_site_form_post(client, path, **foreign)
        assert response.status_code in (401, 403), (path, response.content)
        if anonymous:
            assert_error(response, 403, "CROSS_SITE_REQUEST")
    assert unchanged(live_engine)


def test_with_anonymous_admin_on_a_same_site_page_works_and_a_browser_with_cookies_needs_csrf(
        live_engine: Engine, anonymous_admin: Any) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="q")
    client = Client(enforce_csrf_checks=True)
    assert cross_site_form_post(client, "/api/v1/queues/q/pause", Origin="http://testserver").status_code == 200
    client.get("/api/v1/queues", HTTP_ACCEPT="text/html")  # a browser that has the CSRF cookie
    token = client.cookies["csrftoken"].value
    response = cross_site_form_post(client, "/api/v1/queues/q/purge")
    assert response.status_code == 403 and "CSRF" in response.json()["error"]["message"]
    assert live_engine.queues.get("q")["waiting"] == 1
    response = client.post("/api/v1/queues/q/purge", headers={"X-CSRFToken": token})
    assert response.status_code == 200 and response.json()["count"] == 1


@pytest.mark.parametrize("raw", ["maybe", "2"])
def test_allow_anonymous_admin_must_be_a_boolean(raw: str) -> None:
    with pytest.raises(ConfigError, match="DTQ_ALLOW_ANONYMOUS_ADMIN must be true or false"):
        read_env({"DTQ_ALLOW_ANONYMOUS_ADMIN": raw}.get)
    assert read_env({}.get).allow_anonymous_admin is False


def test_allow_anonymous_admin_with_a_key_set_is_refused() -> None:
    with pytest.raises(ConfigError, match="DTQ_ALLOW_ANONYMOUS_ADMIN=true cannot be combined with DTQ_API_KEY"):
        read_env({"DTQ_ALLOW_ANONYMOUS_ADMIN": "true", "DTQ_API_KEY": "k"}.get)


def test_without_a_key_a_staff_session_with_the_permission_is_audited_by_name(live_engine: Engine, staff: User) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="q")
    client, token = csrf_client(staff)
    assert client.post("/api/v1/queues/q/purge", headers={"X-CSRFToken": token}).json()["count"] == 1
    assert live_engine.audit.list(limit=1).items[0]["actor"] == "user:ops"


def test_a_401_names_the_header_scheme(keyed: Engine) -> None:
    keyed.tasks.enqueue("dtq.echo", queue="q")
    response = APIClient().post("/api/v1/queues/q/pause")
    assert response.status_code == 401 and "X-API-Key" in response.json()["error"]["message"]
    assert response["WWW-Authenticate"].startswith("X-API-Key")


@pytest.mark.parametrize(("debug", "key", "anonymous", "warned"), [
    (False, "", True, True), (True, "", True, True), (False, "", False, False), (False, "k", False, False)])
def test_a_system_check_warns_when_destructive_operations_are_open(
        settings: Any, debug: bool, key: str, anonymous: bool, warned: bool) -> None:
    settings.DEBUG = debug
    settings.DTQ = {**settings.DTQ, "API_KEY": key, "ALLOW_ANONYMOUS_ADMIN": anonymous}
    ids = [m.id for m in run_checks(tags=["security"])]
    assert ("dtq.W001" in ids) is warned


@pytest.mark.parametrize(("anonymous", "warned"), [(True, True), (False, False)])
def test_the_web_process_logs_the_open_destructive_operations_warning(
        settings: Any, caplog: pytest.LogCaptureFixture, anonymous: bool, warned: bool) -> None:
    # daphne runs no system checks: the ASGI entry point logs dtq's own at start instead.
    from dtq_site.handlers import log_dtq_checks

    settings.DEBUG = False
    settings.DTQ = {**settings.DTQ, "ALLOW_ANONYMOUS_ADMIN": anonymous}
    with caplog.at_level(logging.WARNING, logger="dtq.site"):
        log_dtq_checks()
    assert any("dtq.W001" in r.getMessage() for r in caplog.records) is warned
