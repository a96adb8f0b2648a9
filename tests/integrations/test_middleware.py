"""Task headers, enqueue and execution middleware, and the lifecycle signals (issue 25), with real
worker processes: a tenant set where the task is enqueued reaches its sync and async handlers
through a header, a suspended tenant's enqueue is refused everywhere (Python, REST single and
batch), on_error and the signals see a failure, a receiver that raises fails nothing."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

import dtq_tasks
from dtq_core.engine import Engine
from dtq_core.errors import TaskRefused, ValidationError

from ..api.support import assert_error
from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST
from . import mw

MIDDLEWARE = {"DTQ_TASK_MODULES": "tests.integrations.mw", "DTQ_TEST_SIGNALS": "1",
              "DTQ_ENQUEUE_MIDDLEWARE": "tests.integrations.mw.TenantHeader",
              "DTQ_EXECUTION_MIDDLEWARE": "tests.integrations.mw.TenantContext"}


@pytest.fixture
def tenant_settings(settings: Any, live_engine: Engine) -> Iterator[Engine]:
    settings.DTQ = {**settings.DTQ, "ENQUEUE_MIDDLEWARE": ["tests.integrations.mw.TenantHeader"],
                    "ACCEPT_UNKNOWN_TYPES": True}
    yield live_engine


@pytest.fixture
def as_tenant() -> Iterator[Callable[[str | None], None]]:
    tokens = []

    def set_tenant(name: str | None) -> None:
        tokens.append(mw.current_tenant.set(name))

    yield set_tenant
    for token in reversed(tokens):
        mw.current_tenant.reset(token)


@pytest.fixture
def receivers() -> Iterator[None]:
    """The test's signal receivers, in this process (enqueue side) for this test only."""
    mw.connect()
    yield
    mw.disconnect()


def logged(client: redis.Redis, engine: Engine, kind: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in client.lrange(f"{engine.keys.prefix}:testlog:{kind}", 0, -1)]


def _engine() -> Engine:
    from dtq_core.conf import get_engine
    return get_engine()


def test_a_tenant_reaches_sync_and_async_handlers_through_a_header(
        tenant_settings: Engine, as_tenant: Callable[[str | None], None], redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    engine = _engine()
    as_tenant("acme")
    ids = [dtq_tasks.enqueue("mw.whoami", queue="mw"), dtq_tasks.enqueue("mw.awhoami", queue="mw")]
    as_tenant(None)
    plain = dtq_tasks.enqueue("mw.whoami", queue="mw", headers={"trace": "t-1"})
    worker = start_worker("--name", "mw", "--queues", "mw", **{**FAST, **MIDDLEWARE})
    for task_id in [*ids, plain]:
        wait_for(lambda t=task_id: engine.tasks.get(t)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
    assert [engine.tasks.get(t)["result"] for t in ids] == [{"tenant": "acme"}, {"tenant": "acme"}]
    assert engine.tasks.get(ids[0])["headers"] == {"tenant": "acme"}
    assert engine.tasks.get(plain)["result"] == {"tenant": None}
    assert engine.tasks.get(plain)["headers"] == {"trace": "t-1"}
    assert sorted(a["task_id"] for a in logged(redis_client, engine, "after")) == sorted([*ids, plain])


def test_a_refused_enqueue_is_refused_everywhere_and_queues_nothing(
        tenant_settings: Engine, as_tenant: Callable[[str | None], None]) -> None:
    engine = _engine()
    as_tenant("suspended")
    with pytest.raises(TaskRefused, match="tenant 'suspended' may not enqueue mw.whoami"):
        dtq_tasks.enqueue("mw.whoami", queue="refused")
    api = APIClient()
    error = assert_error(api.post("/api/v1/tasks", {"type": "mw.whoami", "queue": "refused"}, format="json"), 400,
                         "TASK_REFUSED")
    assert "suspended" in error["message"]
    batch = api.post("/api/v1/tasks/batch", {"tasks": [{"type": "mw.whoami", "queue": "refused"}]}, format="json")
    assert batch.status_code == 200 and batch.json()["results"][0]["error"]["code"] == "TASK_REFUSED"
    assert engine.tasks.list(queue="refused").items == []


def test_on_error_and_the_signals_see_a_failure_and_a_raising_receiver_fails_nothing(
        receivers: None, tenant_settings: Engine, as_tenant: Callable[[str | None], None], redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    engine = _engine()
    as_tenant("acme")
    failing = dtq_tasks.enqueue("mw.boom", queue="mw", max_attempts=2)
    fine = dtq_tasks.enqueue("mw.whoami", queue="mw")
    worker = start_worker("--name", "mw", "--queues", "mw", **{**FAST, **MIDDLEWARE})
    wait_for(lambda: engine.tasks.get(failing)["status"] == "DEAD_LETTERED", timeout=20, message=worker.output)
    wait_for(lambda: engine.tasks.get(fine)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
    errors = logged(redis_client, engine, "on_error")
    assert [(e["task_id"], e["error"], e["message"]) for e in errors] == \
        [(failing, "RetryableError", "boom for acme")] * 2
    signals = logged(redis_client, engine, "signal")

    def of(task_id: str) -> list[tuple[str, Any]]:
        return [(s["kind"], s.get("attempt")) for s in signals if s["task_id"] == task_id]

    # Queued in this process (the test's receivers are connected here too), the rest in the worker.
    wait_for(lambda: ("dead_lettered", 2) in of(failing), timeout=10)
    signals = logged(redis_client, engine, "signal")
    assert of(failing) == [("queued", None), ("started", 1), ("failed", 1), ("started", 2), ("failed", 2),
                           ("dead_lettered", 2)]
    failed = [s for s in signals if s["task_id"] == failing and s["kind"] == "failed"]
    assert [(f["exception"], f["will_retry"]) for f in failed] == [("RetryableError", True), ("RetryableError", False)]
    dead = next(s for s in signals if s["task_id"] == failing and s["kind"] == "dead_lettered")
    assert dead["error_class"] == "dtq_tasks.RetryableError" and dead["error_message"] == "boom for acme"
    assert of(fine) == [("queued", None), ("started", 1), ("succeeded", 1)]
    succeeded = next(s for s in signals if s["task_id"] == fine and s["kind"] == "succeeded")
    assert succeeded["result"] == {"tenant": "acme"} and succeeded["duration_s"] >= 0
    queued = next(s for s in signals if s["task_id"] == fine and s["kind"] == "queued")
    assert queued["headers"] == {"tenant": "acme"} and queued["queue"] == "mw" and queued["type"] == "mw.whoami"
    assert "receiver" in worker.output() and "RuntimeError: a receiver that fails" in worker.output()


@pytest.mark.parametrize("setting,path,message", [
    ("DTQ_EXECUTION_MIDDLEWARE", "tests.integrations.nowhere.Thing", "cannot import"),
    ("DTQ_EXECUTION_MIDDLEWARE", "tests.integrations.mw.Missing", "names nothing"),
    ("DTQ_ENQUEUE_MIDDLEWARE", "tests.integrations.mw.NotMiddleware",
     "is not a subclass of dtq_tasks.EnqueueMiddleware"),
])
def test_a_bad_middleware_path_stops_the_worker_with_one_line(
        start_worker: Callable[..., WorkerProcess], setting: str, path: str, message: str) -> None:
    worker = start_worker("--name", "bad", **{**FAST, "DTQ_TASK_MODULES": "tests.integrations.mw", setting: path})
    assert worker.wait(timeout=30) != 0
    lines = [line for line in worker.output().splitlines() if setting in line]
    assert len(lines) == 1 and message in lines[0] and path in lines[0], worker.output()


@pytest.mark.parametrize("headers,message", [
    ("x", "headers must be an object"), ({"a": 1}, "header 'a' must be a string"),
    ({"bad name": "v"}, "header name 'bad name'"), ({f"h{i}": "v" for i in range(33)}, "at most 32 entries"),
    ({"a": "x" * 1025}, "at most 1024 characters"), ({f"h{i}": "x" * 1000 for i in range(5)}, "the limit is 4096"),
])
def test_bad_headers_are_refused_in_python_and_rest(live_engine: Engine, headers: Any, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        live_engine.tasks.enqueue("dtq.echo", headers=headers)
    error = assert_error(APIClient().post("/api/v1/tasks", {"type": "dtq.echo", "headers": headers}, format="json"),
                         400, "VALIDATION_ERROR")
    assert message in error["message"]
    assert live_engine.tasks.list().items == []


def test_headers_over_rest_are_kept_and_shown(live_engine: Engine) -> None:
    api = APIClient()
    created = api.post("/api/v1/tasks", {"type": "dtq.echo", "headers": {"traceparent": "00-ab-cd-01"}},
                       format="json").json()
    assert created["headers"] == {"traceparent": "00-ab-cd-01"}
    assert api.get(f"/api/v1/tasks/{created['id']}").json()["headers"] == {"traceparent": "00-ab-cd-01"}
    assert "headers" not in api.post("/api/v1/tasks", {"type": "dtq.echo"}, format="json").json()


def test_rest_with_redis_down_is_503_and_headers_change_nothing() -> None:
    assert_error(APIClient().post("/api/v1/tasks", {"type": "dtq.echo", "headers": {"a": "b"}}, format="json"),
                 503, "REDIS_UNAVAILABLE")
