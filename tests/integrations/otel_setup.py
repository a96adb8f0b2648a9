"""For worker processes of the tracing test (DTQ_TASK_MODULES=tests.integrations.otel_setup): the
OpenTelemetry SDK as a project would configure it, exporting every finished span as a JSON line to
the file DTQ_TEST_SPANS names, and a handler that fails its first attempt."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

import dtq_tasks


def span_json(span: ReadableSpan) -> dict[str, Any]:
    ctx, parent = span.get_span_context(), span.parent
    return {"name": span.name, "kind": span.kind.name, "trace_id": f"{ctx.trace_id:032x}",
            "span_id": f"{ctx.span_id:016x}", "parent_id": f"{parent.span_id:016x}" if parent else None,
            "attributes": dict(span.attributes or {}), "status": span.status.status_code.name,
            "events": [e.name for e in span.events]}


class FileExporter(SpanExporter):
    def __init__(self, path: str) -> None:
        self.path = path

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        with open(self.path, "a") as out:
            for span in spans:
                out.write(json.dumps(span_json(span)) + "\n")
        return SpanExportResult.SUCCESS


if os.environ.get("DTQ_TEST_SPANS"):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(FileExporter(os.environ["DTQ_TEST_SPANS"])))
    trace.set_tracer_provider(provider)


@dtq_tasks.task("otel.flaky")
def flaky(payload: Any) -> Any:
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    if ctx.attempt == 1:
        raise dtq_tasks.RetryableError("first attempt fails")
    return {"attempt": ctx.attempt}
