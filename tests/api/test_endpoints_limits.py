"""GET/PUT/DELETE /api/v1/queues/<q>/limits and the queue detail's "limits": the contract's envelope
on malformed, oversized and unknown input, 503 with Redis down, every change audited, and who may
change them (X-API-Key, or a staff session with CSRF and change_queue_limits)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..redis_server import RedisServer
from .support import assert_error, drain
from .test_auth import FINGERPRINT, KEY, csrf_client

LIMITS = {"concurrency": 2, "rate": {"limit": 5, "period_s": 1}, "group_concurrency": 1,
          "group_rate": {"limit": 10, "period_s": 60}}
NONE = {"concurrency": None, "rate": None, "group_concurrency": None, "group_rate": None}


def put(api: APIClient, queue: str, body: Any, **headers: str) -> Any:
    return api.put(f"/api/v1/queues/{queue}/limits", json.dumps(body), content_type="application/json",
                   headers=headers)


def limits_audit(engine: Engine) -> list[tuple[str, str, str]]:
    return [(e["action"], e["target"], e["actor"]) for e in reversed(engine.audit.list(limit=500).items)]


def test_put_sets_them_get_and_the_queue_detail_show_them_with_usage(api: APIClient, live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="mail")
    assert api.get("/api/v1/queues/mail/limits").json() == {
        "queue": "mail", **NONE, "source": None, "paused_until": None, "scope": "exact",
        "usage": {"running": 0, "rate_used": 0, "groups_running": 0, "throttled_total": 0}}
    response = put(api, "mail", LIMITS)
    assert response.status_code == 200, response.content
    shown = response.json()
    assert {k: shown[k] for k in LIMITS} == {**LIMITS, "rate": {"limit": 5, "period_s": 1.0},
                                             "group_rate": {"limit": 10, "period_s": 60.0}}
    assert shown["source"] == "api" and shown["queue"] == "mail"
    assert api.get("/api/v1/queues/mail/limits").json() == shown
    detail = api.get("/api/v1/queues/mail").json()
    assert detail["limits"] == shown and detail["waiting"] == 1
    # The list stays as it was: one row per queue, no limits.
    assert "limits" not in api.get("/api/v1/queues").json()["results"][0]
    assert limits_audit(live_engine) == [("queue.limits", "queue:mail", "api:anonymous")]


def test_usage_counts_the_starts_in_the_rate_window(api: APIClient, live_engine: Engine) -> None:
    put(api, "mail", {"rate": {"limit": 100, "period_s": 3600}})
    for _ in range(3):
        live_engine.tasks.enqueue("dtq.echo", queue="mail")
    drain(live_engine.config, queues=["mail"])
    usage = api.get("/api/v1/queues/mail/limits").json()["usage"]
    assert usage["rate_used"] == 3 and usage["running"] == 0


def test_put_replaces_every_limit_and_delete_clears_them(api: APIClient, live_engine: Engine) -> None:
    put(api, "mail", LIMITS)
    replaced = put(api, "mail", {"concurrency": 4}).json()
    assert {k: replaced[k] for k in NONE} == {**NONE, "concurrency": 4}  # a field left out: no such limit
    nulls = put(api, "mail", {"concurrency": None, "rate": {"limit": 3, "period_s": 0.5}}).json()
    assert nulls["concurrency"] is None and nulls["rate"] == {"limit": 3, "period_s": 0.5}
    cleared = api.delete("/api/v1/queues/mail/limits")
    assert cleared.status_code == 200 and {k: cleared.json()[k] for k in NONE} == NONE
    assert cleared.json()["source"] is None  # no limits: nobody set any
    assert api.get("/api/v1/queues/mail").json()["limits"]["concurrency"] is None
    assert [a for a, *_ in limits_audit(live_engine)] == ["queue.limits"] * 4


def test_put_on_a_queue_not_used_yet_creates_it_with_its_limits(api: APIClient) -> None:
    assert_error(api.get("/api/v1/queues/fresh"), 404, "QUEUE_NOT_FOUND")
    assert put(api, "fresh", {"concurrency": 1}).status_code == 200
    assert api.get("/api/v1/queues/fresh").json()["limits"]["concurrency"] == 1


@pytest.mark.parametrize("body", [
    [], "x", 42, None, [LIMITS],                                      # not an object
    {"colour": "red"}, {"concurrency": 2, "priority": 1},             # unknown fields
    {"concurrency": 0}, {"concurrency": 100_001}, {"concurrency": 1.5}, {"concurrency": "2"},
    {"concurrency": True}, {"group_concurrency": -1}, {"concurrency": [2]}, {"concurrency": {"n": 2}},
    {"rate": 5}, {"rate": "5/1s"}, {"rate": [5, 1]}, {"rate": {"limit": 5}}, {"rate": {"period_s": 1}},
    {"rate": {"limit": 0, "period_s": 1}}, {"rate": {"limit": 5, "period_s": 0}},
    {"rate": {"limit": 5, "period_s": "1"}}, {"rate": {"limit": 5, "period_s": 86_401}},
    {"group_rate": {"limit": 5, "period_s": 1, "burst": 2}},
])
def test_malformed_bodies_are_400_validation_errors_and_change_nothing(api: APIClient, live_engine: Engine,
                                                                       body: Any) -> None:
    put(api, "mail", LIMITS)
    error = assert_error(put(api, "mail", body), 400, "VALIDATION_ERROR")
    assert error["message"]
    assert {k: api.get("/api/v1/queues/mail/limits").json()[k] for k in ("concurrency", "group_concurrency")} == \
        {"concurrency": 2, "group_concurrency": 1}
    assert len(limits_audit(live_engine)) == 1


def test_the_error_names_the_field_that_is_wrong(api: APIClient, live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="mail")
    error = assert_error(put(api, "mail", {"rate": {"limit": 5, "period_s": 0}}), 400, "VALIDATION_ERROR")
    assert error["field"] == "rate.period_s" and "0.001" in error["message"]
    error = assert_error(put(api, "mail", {"burst": 3}), 400, "VALIDATION_ERROR")
    assert "burst" in error["message"] and "unknown" in error["message"]


def test_a_body_that_is_not_json_or_none_at_all_is_400(api: APIClient, live_engine: Engine) -> None:
    put(api, "mail", LIMITS)
    assert_error(api.put("/api/v1/queues/mail/limits", "{nope", content_type="application/json"), 400,
                 "MALFORMED_JSON")
    # A bare PUT (curl -X PUT without -d) must not lift every limit.
    error = assert_error(api.put("/api/v1/queues/mail/limits"), 400, "VALIDATION_ERROR")
    assert "DELETE" in error["message"]
    assert api.get("/api/v1/queues/mail/limits").json()["concurrency"] == 2


def test_oversized_input_is_refused(api: APIClient, live_engine: Engine, settings: Any) -> None:
    put(api, "mail", LIMITS)
    huge = json.dumps({"concurrency": 2, "x": "y" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 10)})
    assert_error(api.put("/api/v1/queues/mail/limits", huge, content_type="application/json"), 413,
                 "PAYLOAD_TOO_LARGE")
    # A number of 400 digits is a 400 naming the field, not a 500.
    body = '{"concurrency": 1' + "0" * 400 + "}"
    error = assert_error(api.put("/api/v1/queues/mail/limits", body, content_type="application/json"), 400,
                         "VALIDATION_ERROR")
    assert error["field"] == "concurrency"
    assert_error(api.get("/api/v1/queues/" + "q" * 5000 + "/limits"), 404, "QUEUE_NOT_FOUND")
    assert api.get("/api/v1/queues/mail/limits").json()["concurrency"] == 2
    assert len(limits_audit(live_engine)) == 1


@pytest.mark.parametrize("name", ["nope", "UPPER", "a" * 65, "dlq"])
def test_an_unknown_queue_is_404_and_nothing_is_created_or_audited(api: APIClient, live_engine: Engine,
                                                                    name: str) -> None:
    assert_error(api.get(f"/api/v1/queues/{name}/limits"), 404, "QUEUE_NOT_FOUND")
    assert_error(api.delete(f"/api/v1/queues/{name}/limits"), 404, "QUEUE_NOT_FOUND")
    if name != "nope":  # a valid name not used yet is created by PUT (the test above)
        assert_error(put(api, name, LIMITS), 404, "QUEUE_NOT_FOUND")
    assert api.get("/api/v1/queues").json()["results"] == [] and live_engine.audit.list().items == []


def test_wrong_methods_are_405(api: APIClient, live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="mail")
    assert_error(api.post("/api/v1/queues/mail/limits", LIMITS, format="json"), 405, "METHOD_NOT_ALLOWED")
    assert_error(api.patch("/api/v1/queues/mail/limits", LIMITS, format="json"), 405, "METHOD_NOT_ALLOWED")


def test_limits_endpoints_answer_503_when_redis_is_down() -> None:
    api = APIClient()
    for response in (api.get("/api/v1/queues/mail/limits"), put(api, "mail", LIMITS),
                     api.delete("/api/v1/queues/mail/limits"), api.get("/api/v1/queues/mail")):
        assert_error(response, 503, "REDIS_UNAVAILABLE")


def test_a_frozen_redis_gives_503_within_2_seconds(frozen_redis: RedisServer) -> None:
    api = APIClient()
    for call in (lambda: api.get("/api/v1/queues/mail/limits"), lambda: put(api, "mail", LIMITS)):
        started = time.monotonic()
        assert_error(call(), 503, "REDIS_UNAVAILABLE")
        assert time.monotonic() - started < 2


def test_the_schema_names_the_limits_endpoints(api: APIClient) -> None:
    schema = api.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    assert set(schema["paths"]["/api/v1/queues/{queue}/limits"]) >= {"get", "put", "delete"}
    components = schema["components"]["schemas"]
    assert set(components["Limits"]["properties"]) == set(LIMITS)
    assert "limits" in components["QueueDetail"]["properties"]


# -- who may change them ---------------------------------------------------------------------------

@pytest.fixture
def closed(settings: Any, live_engine: Engine) -> Engine:
    """The default policy (closed to anonymous callers) with a key set, and queue mail limited."""
    settings.DTQ = {**settings.DTQ, "ALLOW_ANONYMOUS_ADMIN": False, "API_KEY": KEY}
    from dtq_core.conf import get_engine

    engine = get_engine()
    engine.limits.set("mail", {"concurrency": 2}, actor=Actor.cli())
    return engine


def changes(client: APIClient, **headers: str) -> list[Any]:
    return [put(client, "mail", {"concurrency": 5}, **headers),
            client.delete("/api/v1/queues/mail/limits", headers=headers)]


def untouched(engine: Engine) -> bool:
    return engine.limits.get("mail")["concurrency"] == 2 and len(engine.audit.list().items) == 1


def test_with_a_key_set_changes_need_it_and_reads_stay_open(closed: Engine) -> None:
    client = APIClient()
    for response in changes(client):
        assert_error(response, 401, "API_KEY_REQUIRED")
    for response in changes(client, **{"X-API-Key": "wrong"}):
        assert_error(response, 403, "API_KEY_INVALID")
    assert untouched(closed)
    assert client.get("/api/v1/queues/mail/limits").json()["concurrency"] == 2
    assert [r.status_code for r in changes(client, **{"X-API-Key": KEY})] == [200, 200]
    assert [a for a in limits_audit(closed)[1:]] == [("queue.limits", "queue:mail", FINGERPRINT)] * 2


def test_a_staff_session_needs_change_queue_limits_and_csrf(closed: Engine, db: Any) -> None:
    staff = User.objects.create_user("viewer", password="pw-viewer-123456", is_staff=True)
    # pause_queue (another queue action) does not allow changing limits.
    staff.user_permissions.add(Permission.objects.get(codename="pause_queue"))
    client, token = csrf_client(staff)
    for response in changes(client, **{"X-CSRFToken": token}):
        error = assert_error(response, 403, "PERMISSION_DENIED")
        assert "dtq_dashboard.change_queue_limits" in error["message"]
    assert untouched(closed)
    staff.user_permissions.add(Permission.objects.get(codename="change_queue_limits"))
    client, token = csrf_client(staff)  # a fresh session: Django caches permissions per user object
    without_csrf = put(client, "mail", {"concurrency": 5})
    assert without_csrf.status_code == 403 and "CSRF" in without_csrf.json()["error"]["message"]
    assert untouched(closed)
    assert [r.status_code for r in changes(client, **{"X-CSRFToken": token})] == [200, 200]
    assert {actor for *_, actor in limits_audit(closed)[1:]} == {"user:viewer"}


@pytest.fixture
def wide(settings: Any, live_engine: Engine) -> Engine:
    """The process-wide engine with queue "mail" in three partitions (DTQ_QUEUE_PARTITIONS)."""
    from dtq_core.conf import get_engine

    settings.DTQ = {**settings.DTQ, "QUEUE_PARTITIONS": "mail=3"}
    return get_engine()


def test_a_partitioned_queue_shows_its_limits_once_split_per_partition(api: APIClient, wide: Engine) -> None:
    wide.tasks.enqueue("dtq.echo", queue="mail")
    shown = put(api, "mail", {"concurrency": 6, "rate": {"limit": 30, "period_s": 1}}).json()
    assert shown["concurrency"] == 6 and shown["rate"] == {"limit": 30, "period_s": 1.0}  # as set, not a share
    assert shown["scope"] == "per_partition"
    assert api.get("/api/v1/queues/mail").json()["limits"]["scope"] == "per_partition"


def test_the_limits_endpoint_is_browsable(api: APIClient, live_engine: Engine, db: Any) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="mail")
    client = APIClient()
    for logged_in in (False, True):  # a superuser's page also renders the form of PUT
        if logged_in:
            client.force_login(User.objects.create_superuser("root", password="pw-root-123456"))
        response = client.get("/api/v1/queues/mail/limits", HTTP_ACCEPT="text/html")
        assert response.status_code == 200 and response["Content-Type"].startswith("text/html")
        assert b"throttled_total" in response.content
