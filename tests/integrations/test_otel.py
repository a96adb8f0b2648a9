"""OpenTelemetry (issue 25) with the real SDK: one trace from an API submit (inside the request's
span) through both attempts of a retried task run by a real worker process: the producer span of
the submit, then a consumer span per attempt, children of it, with the messaging attributes, the
first attempt's exception recorded."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once
from rest_framework.test import APIClient

from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST
from .otel_setup import span_json


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The test process's SDK, as a project configures it, for this test only: afterwards the
    global provider is reset (as opentelemetry's own test utilities do), so the other tests of this
    process submit without trace context, as in a project without the SDK."""
    exporter = InMemorySpanExporter()  # one per test: shutting the provider down stops it
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    trace._TRACER_PROVIDER = None
    trace._TRACER_PROVIDER_SET_ONCE = Once()


def test_one_trace_from_an_api_submit_through_two_attempts(
        spans: InMemorySpanExporter, live_engine: Engine, tmp_path: Path,
        start_worker: Callable[..., WorkerProcess], settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "ACCEPT_UNKNOWN_TYPES": True}
    with trace.get_tracer("test").start_as_current_span("POST /api/v1/tasks", kind=trace.SpanKind.SERVER) as request:
        created = APIClient().post("/api/v1/tasks", {"type": "otel.flaky", "queue": "traced", "max_attempts": 3},
                                   format="json").json()
    task_id = created["id"]
    assert created["headers"]["traceparent"].startswith("00-")
    producer = next(s for s in map(span_json, spans.get_finished_spans()) if s["kind"] == "PRODUCER")
    trace_id = f"{request.get_span_context().trace_id:032x}"
    assert producer["trace_id"] == trace_id and producer["parent_id"] == f"{request.get_span_context().span_id:016x}"
    assert producer["name"] == "traced publish" and producer["attributes"] == {
        "messaging.system": "dtq", "messaging.operation.type": "publish", "messaging.operation.name": "publish",
        "messaging.destination.name": "traced", "messaging.message.id": task_id, "dtq.task.type": "otel.flaky"}

    exported = tmp_path / "spans.jsonl"
    worker = start_worker("--name", "otel", "--queues", "traced", **{
        **FAST, "DTQ_TASK_MODULES": "tests.integrations.otel_setup", "DTQ_TEST_SPANS": str(exported)})
    wait_for(lambda: live_engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=20, message=worker.output)

    def consumers() -> list[dict[str, Any]]:
        lines = exported.read_text().splitlines() if exported.exists() else []
        return [s for s in map(json.loads, lines) if s["kind"] == "CONSUMER"]

    attempts = wait_for(lambda: consumers() if len(consumers()) == 2 else None, timeout=10, message=worker.output)
    attempts.sort(key=lambda s: s["attributes"]["dtq.task.attempt"])
    for n, span in enumerate(attempts, 1):
        assert span["trace_id"] == trace_id and span["parent_id"] == producer["span_id"]
        assert span["name"] == "traced process"
        assert {k: span["attributes"][k] for k in ("messaging.system", "messaging.destination.name",
                                                   "messaging.message.id", "messaging.operation.type",
                                                   "dtq.task.type", "dtq.task.attempt")} == {
            "messaging.system": "dtq", "messaging.destination.name": "traced", "messaging.message.id": task_id,
            "messaging.operation.type": "process", "dtq.task.type": "otel.flaky", "dtq.task.attempt": n}
    assert attempts[0]["attributes"]["dtq.task.outcome"] == "retry" and attempts[0]["status"] == "ERROR"
    assert attempts[0]["events"] == ["exception"]
    assert attempts[1]["attributes"]["dtq.task.outcome"] == "succeeded" and attempts[1]["status"] == "UNSET"


def test_batch_submits_get_a_producer_span_each(spans: InMemorySpanExporter, live_engine: Engine) -> None:
    results = APIClient().post("/api/v1/tasks/batch", {"tasks": [{"type": "dtq.echo", "queue": "b"}] * 3},
                               format="json").json()["results"]
    produced = [s for s in map(span_json, spans.get_finished_spans()) if s["kind"] == "PRODUCER"]
    assert sorted(s["attributes"]["messaging.message.id"] for s in produced) == sorted(r["id"] for r in results)
    for r in results:
        assert live_engine.tasks.get(r["id"])["headers"]["traceparent"].startswith("00-")


def test_a_batch_item_past_the_queue_bound_is_refused_alone_with_tracing_on(
        spans: InMemorySpanExporter, live_engine: Engine, settings: Any) -> None:
    first = live_engine.tasks.enqueue("dtq.echo", queue="b").id
    settings.DTQ = {**settings.DTQ, "MAX_QUEUES": 1}
    items = [{"type": "dtq.echo", "queue": q} for q in ("b", "new", "b")]
    response = APIClient().post("/api/v1/tasks/batch", {"tasks": items}, format="json")
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[1]["error"]["code"] == "QUEUE_LIMIT_REACHED"
    assert [live_engine.tasks.get(results[i]["id"])["status"] for i in (0, 2)] == ["QUEUED", "QUEUED"]
    produced = [s for s in map(span_json, spans.get_finished_spans()) if s["kind"] == "PRODUCER"]
    # A span for each task sent (the first submit's, the batch's two), none for the refused item.
    assert sorted(s["attributes"]["messaging.message.id"] for s in produced) == sorted(
        [first, results[0]["id"], results[2]["id"]])


def test_a_batch_item_redis_failed_marks_its_own_span_only(
        spans: InMemorySpanExporter, live_engine: Engine, redis_client: redis.Redis, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "MAX_QUEUES": 2}
    layout = live_engine.registry.ensure("err")
    redis_client.hset(live_engine.keys.partition(layout.tag_for("bad")) + "idem:bad", "x", "1")  # wrong type
    items = [{"type": "dtq.echo", "queue": "err"}, {"type": "dtq.echo", "queue": "err", "idempotency_key": "bad"},
             {"type": "dtq.echo", "queue": "new"}, {"type": "dtq.echo", "queue": "more"},
             {"type": "dtq.echo", "queue": "err"}]
    results = APIClient().post("/api/v1/tasks/batch", {"tasks": items}, format="json").json()["results"]
    assert [r.get("error", {}).get("code") for r in results] == [
        None, "INTERNAL_ERROR", None, "QUEUE_LIMIT_REACHED", None]
    produced = {s["attributes"]["messaging.message.id"]: s for s in map(span_json, spans.get_finished_spans())
                if s["kind"] == "PRODUCER"}
    assert len(produced) == 4  # the refused item has none
    for i in (0, 2, 4):
        assert produced.pop(results[i]["id"])["status"] == "UNSET"
    ((_, failed),) = produced.items()
    assert failed["status"] == "ERROR" and failed["events"] == ["exception"]


def test_off_means_no_span_and_no_header(spans: InMemorySpanExporter, live_engine: Engine, settings: Any) -> None:
    assert isinstance(trace.get_tracer_provider(), TracerProvider)  # the SDK is there, and yet:
    settings.DTQ = {**settings.DTQ, "OPENTELEMETRY": "off"}
    created = APIClient().post("/api/v1/tasks", {"type": "dtq.echo"}, format="json").json()
    assert "headers" not in created and spans.get_finished_spans() == ()
    with pytest.raises(ConfigError, match="DTQ_OPENTELEMETRY must be auto or off"):
        DtqConfig(opentelemetry="on")


def test_without_a_configured_sdk_nothing_is_added(live_engine: Engine) -> None:
    # opentelemetry-api installed, no SDK configured (this process's provider was reset): the
    # API's no-op spans carry no context, so the task gets no header.
    assert not isinstance(trace.get_tracer_provider(), TracerProvider)
    created = APIClient().post("/api/v1/tasks", {"type": "dtq.echo"}, format="json").json()
    assert "headers" not in created


def test_a_django_task_enqueued_in_a_span_joins_its_trace(spans: InMemorySpanExporter, live_engine: Engine,
                                                          settings: Any) -> None:
    from dtq_core.django_tasks.compat import task_backends

    from ..django_tasks import tasks_module as tm
    from ..django_tasks.conftest import BACKEND

    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default"], "OPTIONS": {}}}
    assert task_backends["default"] is not None
    with trace.get_tracer("test").start_as_current_span("view") as view:
        result = tm.add.enqueue(2, b=3)
    traceparent = live_engine.tasks.get(result.id)["headers"]["traceparent"]
    assert traceparent.split("-")[1] == f"{view.get_span_context().trace_id:032x}"
    producer = next(s for s in map(span_json, spans.get_finished_spans()) if s["kind"] == "PRODUCER")
    assert producer["attributes"]["messaging.message.id"] == result.id
    assert producer["parent_id"] == f"{view.get_span_context().span_id:016x}"
