"""Every route of the API, every method it answers: with Redis down, with a body that is not JSON,
with JSON of the wrong shape and with a body past the size limit. Each is a clear error in the
envelope (a 503 REDIS_UNAVAILABLE, a 4xx), never a 500, and a live Redis is left as it was.

The routes are read from dtq_api.urls, so a new endpoint is swept without a change here."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

import pytest
from django.urls import URLPattern
from rest_framework.test import APIClient

import dtq_api.urls
from dtq_core.engine import Engine

# A plausible value for each path parameter (well formed, naming nothing that exists).
PARAMETERS = {"task_id": "abc123-" + "0" * 32, "queue": "default", "entry_id": "1-0", "worker_id": "w1",
              "name": "nightly", "workflow_id": "abc123-w" + "0" * 31}
# A body each writing route would accept with Redis up, so that with Redis down the call gets as
# far as Redis. Routes not listed get {} (their bodies are optional or all defaults).
BODIES: dict[tuple[str, str], Any] = {
    ("POST", "api/v1/tasks"): {"type": "dtq.echo"},
    ("POST", "api/v1/tasks/batch"): {"tasks": [{"type": "dtq.echo"}, {"type": "dtq.echo", "queue": "other"}]},
    ("POST", "api/v1/dlq/retry"): {"queue": "default"},
    ("POST", "api/v1/dlq/discard"): {"queue": "default"},
    ("PUT", "api/v1/queues/<str:queue>/limits"): {"concurrency": 2},
    ("POST", "api/v1/periodic"): {"name": "nightly", "type": "dtq.echo", "cron": "0 3 * * *"},
    ("PATCH", "api/v1/periodic/<str:name>"): {"cron": "0 4 * * *"},
    ("POST", "api/v1/workflows"): {"chain": [{"type": "dtq.echo"}, {"type": "dtq.echo"}]},
}
WRONG_SHAPES = ["[]", "123", '"text"', "null", '{"tasks": "x", "type": 5, "cron": [], "chain": {}, "queue": {}}']
WRITING = ("POST", "PUT", "PATCH", "DELETE")


def views() -> dict[str, Any]:
    """Each API route's view class, by route."""
    return {str(p.pattern): p.callback.view_class for p in dtq_api.urls.urlpatterns  # type: ignore[union-attr]
            if hasattr(p.callback, "view_class")}


def routes() -> list[tuple[str, str]]:
    """(method, route) for every method each API route's view answers."""
    found = []
    for pattern in dtq_api.urls.urlpatterns:
        assert isinstance(pattern, URLPattern)
        route = str(pattern.pattern)
        view = getattr(pattern.callback, "view_class", None) or getattr(pattern.callback, "cls", None)
        if route.startswith("^") or view is None:  # the catch-all 404 and function views (probes)
            continue
        methods = [m.upper() for m in view.http_method_names if hasattr(view, m) and m not in ("options", "head")]
        found += [(method, route) for method in methods]
    return sorted(set(found))


def url(route: str) -> str:
    return "/" + re.sub(r"<str:(\w+)>", lambda m: PARAMETERS[m.group(1)], route)


def call(api: APIClient, method: str, route: str, raw: str | None = None) -> Any:
    if raw is None:
        raw = json.dumps(BODIES.get((method, route), {})) if method in WRITING else ""
    return getattr(api, method.lower())(url(route), raw, content_type="application/json")


def assert_clear(response: Any) -> dict[str, Any]:
    """A 4xx or a 503 in the envelope: never a 500, never another page."""
    assert response.status_code < 500 or response.status_code == 503, (response.status_code, response.content[:300])
    if response.status_code >= 400:
        assert response["Content-Type"].startswith("application/json"), response.content[:300]
        error: dict[str, Any] = response.json()["error"]
        assert error["code"] and error["message"] and error["request_id"] == response["X-Request-ID"]
        return error
    return {}


def test_the_sweep_finds_every_api_route() -> None:
    swept = routes()
    assert len({route for _, route in swept}) >= 35  # a broken discovery would pass everything below
    assert ("POST", "api/v1/tasks") in swept and ("POST", "api/v1/dlq/<str:entry_id>/retry") in swept
    assert {(m, r) for m, r in BODIES} <= set(swept)
    # The routes whose handler reads a body are the ones BODIES lists: a new one is swept below.
    by_route = views()
    reading = {(m, r) for m, r in swept if m in WRITING and re.search(
        r"request\.data|respond\(", inspect.getsource(getattr(by_route[r], m.lower())))}
    assert reading == set(BODIES)


@pytest.mark.parametrize(("method", "route"), routes())
def test_with_redis_down_every_call_is_a_503_or_a_clear_refusal(method: str, route: str) -> None:
    # The autouse settings point at 127.0.0.1:1, where nothing listens.
    response = call(APIClient(), method, route)
    error = assert_clear(response)
    if response.status_code == 503:
        assert error["code"] == "REDIS_UNAVAILABLE"
    elif route in ("api/schema/", "api/schema", "api/docs/", "api/v1/", "api/v1"):
        assert response.status_code == 200  # served without Redis
    else:  # refused before Redis: then for a reason of the request's own
        assert 400 <= response.status_code < 500 and error["code"] != "INTERNAL_ERROR"


def _writing_routes() -> list[tuple[str, str]]:
    """The routes that read a body (the others answer whatever body comes, as HTTP allows)."""
    return sorted(BODIES)


@pytest.mark.parametrize(("method", "route"), _writing_routes())
def test_every_body_that_is_not_json_or_not_the_right_shape_is_a_400(api: APIClient, live_engine: Engine,
                                                                      method: str, route: str) -> None:
    before = _snapshot(live_engine)
    error = assert_clear(call(api, method, route, "{not json"))
    assert error["code"] == "MALFORMED_JSON", error
    for raw in WRONG_SHAPES:
        response = call(api, method, route, raw)
        error = assert_clear(response)
        assert response.status_code >= 400 or not raw.startswith("{"), (raw, response.content[:300])
    assert _snapshot(live_engine) == before


@pytest.mark.parametrize(("method", "route"), _writing_routes())
def test_every_body_past_the_size_limit_is_a_413(api: APIClient, live_engine: Engine, settings: Any,
                                                 method: str, route: str) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 4096
    before = _snapshot(live_engine)
    body = json.dumps({**BODIES.get((method, route), {}), "padding": "x" * 8192})
    error = assert_clear(call(api, method, route, body))
    assert error["code"] == "PAYLOAD_TOO_LARGE", error
    assert _snapshot(live_engine) == before


def _snapshot(engine: Engine) -> tuple[int, int, int]:
    """What a refused call must not change: keys under the test's prefix, dead letters, audit rows."""
    keys = sum(1 for _ in engine.client.scan_iter(match=f"{engine.keys.prefix}*", count=1000))
    return keys, engine.dlq.count(), len(engine.audit.list(limit=500).items)
