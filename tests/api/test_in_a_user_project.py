"""The API in a project of a user's own: an empty REST_FRAMEWORK, no RequestIdMiddleware, mounted
under a prefix (tests/user_project/urls.py). dtq's views bring the DRF settings they rely on."""

from __future__ import annotations

import json
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_api.checks import request_id_middleware_missing
from dtq_core.engine import Engine

MIDDLEWARE = "dtq_api.middleware.RequestIdMiddleware"


@pytest.fixture
def user_project(settings: Any) -> Any:
    settings.ROOT_URLCONF = "tests.user_project.urls"
    settings.REST_FRAMEWORK = {}
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != MIDDLEWARE]
    return settings


def test_a_submit_works_without_rest_framework_settings_or_the_request_id_middleware(
        user_project: Any, live_engine: Engine) -> None:
    response = APIClient().post("/ops-api/api/v1/tasks", json.dumps({"type": "dtq.echo", "payload": {"n": 1}}),
                                content_type="application/json")
    assert response.status_code == 201, response.content
    task = live_engine.tasks.get(response.json()["id"])
    assert len(task["request_id"]) == 32  # made for the request, as the middleware would


def test_errors_keep_dtq_s_envelope_without_rest_framework_settings(user_project: Any, live_engine: Engine) -> None:
    response = APIClient().post("/ops-api/api/v1/tasks", "{not json", content_type="application/json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "MALFORMED_JSON" and len(error["request_id"]) == 32
    missing = APIClient().get("/ops-api/api/v1/tasks/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "TASK_NOT_FOUND"


def test_the_schema_is_served_without_rest_framework_settings(user_project: Any) -> None:
    response = APIClient().get("/ops-api/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    assert "tasks_submit" in response.content.decode()


def test_a_check_says_what_to_add_when_the_request_id_middleware_is_missing(settings: Any) -> None:
    assert request_id_middleware_missing() == []
    settings.MIDDLEWARE = [m for m in settings.MIDDLEWARE if m != MIDDLEWARE]
    [warning] = request_id_middleware_missing()
    assert warning.id == "dtq.W801"
    assert warning.hint == 'Add "dtq_api.middleware.RequestIdMiddleware" as the first entry of MIDDLEWARE.'
