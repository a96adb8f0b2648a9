"""What bench_integrations switches on, for the worker processes (DTQ_TASK_MODULES) and the
enqueuing engine: pass-through middleware of each kind, and a receiver on every signal."""

from __future__ import annotations

import os
from typing import Any

import dtq_tasks


class PassEnqueue(dtq_tasks.EnqueueMiddleware):
    def before_enqueue(self, task: dtq_tasks.OutgoingTask) -> None:
        task.headers["bench"] = "1"


class PassExecution(dtq_tasks.ExecutionMiddleware):
    """The hooks' defaults: before, after, on_error, each a call that does nothing."""


def _receiver(sender: Any, **kwargs: Any) -> None:
    return None


def connect_receivers() -> None:
    from dtq_tasks import signals

    for signal in (signals.task_queued, signals.task_started, signals.task_succeeded, signals.task_failed,
                   signals.task_dead_lettered):
        signal.connect(_receiver)


if os.environ.get("DTQ_BENCH_SIGNALS"):
    connect_receivers()


def configure_tracing() -> Any:
    """The OpenTelemetry SDK with an exporter that drops what it gets: what making the spans costs."""
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)
    return provider


def configure_sentry(*, bare: bool = False) -> None:
    """sentry_sdk.init as a project calls it; bare: without its default integrations (its redis-py
    and logging instrumentation, which record a breadcrumb per Redis command), to tell its cost from dtq's."""
    import sentry_sdk
    from sentry_sdk.transport import Transport

    class Dropping(Transport):
        def capture_envelope(self, envelope: Any) -> None:
            return None

    sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", transport=Dropping, default_integrations=not bare,
                    auto_enabling_integrations=not bare)


if os.environ.get("DTQ_BENCH_TRACING"):
    configure_tracing()
if os.environ.get("DTQ_BENCH_SENTRY"):
    configure_sentry(bare=os.environ["DTQ_BENCH_SENTRY"] == "bare")
