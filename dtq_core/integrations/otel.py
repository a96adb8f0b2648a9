"""OpenTelemetry tracing (docs/observability.md, "Tracing"): a PRODUCER span per enqueue, whose
W3C trace context travels in the task's headers (traceparent, tracestate), and a CONSUMER span per
attempt that continues it, so a trace runs from the request that enqueued a task through every
attempt of it. Spans follow the messaging semantic conventions (messaging.system "dtq").

dtq only uses opentelemetry-api: the project configures the SDK (TracerProvider, exporter) as it
does for the rest of its code. Without a configured SDK the API's no-op tracer makes the spans
nothing, so dtq makes none (it checks for a configured provider per task: a global read).
DTQ_OPENTELEMETRY=off turns it off; without opentelemetry installed it is off.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import propagate, trace
    from opentelemetry.trace import SpanKind, StatusCode
except ImportError:  # an optional dependency
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from ..config import DtqConfig
    from ..registry import TaskContext
    from ..submit import Submission

SYSTEM = "dtq"
_ENCODE = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


_NO_SDK = ("ProxyTracerProvider", "NoOpTracerProvider")


def enabled(config: DtqConfig) -> bool:
    """Tracing is on: DTQ_OPENTELEMETRY is not "off", and the project has set a tracer provider
    (the SDK's). With opentelemetry-api installed but no SDK configured (a library that pulls the
    API in), the API's spans would be no-ops that still cost a fifth of the drain rate: skipped."""
    return (trace is not None and config.opentelemetry != "off"
            and type(trace.get_tracer_provider()).__name__ not in _NO_SDK)


def _tracer() -> Any:
    return trace.get_tracer("dtq")


@contextmanager
def publishing(submissions: Sequence[Submission]) -> Iterator[list[Submission]]:
    """PRODUCER spans for these submissions (placed: their ids are known), open while they are
    sent; yields the submissions with each span's context in its headers."""
    with publishing_each(submissions) as (out, _):
        yield out


@contextmanager
def publishing_each(submissions: Sequence[Submission]
                    ) -> Iterator[tuple[list[Submission], Callable[[int, BaseException], None]]]:
    """publishing() for a batch answered task by task: yields the submissions and a function
    that marks the i-th one's span as failed with its own error (the others' spans stay OK)."""
    tracer = _tracer()
    spans, out = [], []
    for s in submissions:
        span = tracer.start_span(f"{s.queue} publish", kind=SpanKind.PRODUCER, attributes={
            "messaging.system": SYSTEM, "messaging.operation.type": "publish", "messaging.operation.name": "publish",
            "messaging.destination.name": s.queue, "messaging.message.id": s.task_id, "dtq.task.type": s.type})
        carrier: dict[str, str] = json.loads(s.headers_json) if s.headers_json else {}
        propagate.inject(carrier, context=trace.set_span_in_context(span))
        out.append(dataclasses.replace(s, headers_json=_ENCODE(carrier)) if carrier else s)
        spans.append(span)

    def failed(i: int, exc: BaseException) -> None:
        spans[i].record_exception(exc)
        spans[i].set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")

    try:
        yield out, failed
    except BaseException as exc:
        for i in range(len(spans)):
            failed(i, exc)
        raise
    finally:
        for span in spans:
            span.end()


@contextmanager
def _processing(ctx: TaskContext) -> Iterator[Any]:
    parent = propagate.extract(dict(ctx.headers)) if ctx.headers else None
    with _tracer().start_as_current_span(
            f"{ctx.queue} process", context=parent, kind=SpanKind.CONSUMER, record_exception=False,
            set_status_on_exception=False, attributes={
                "messaging.system": SYSTEM, "messaging.operation.type": "process",
                "messaging.operation.name": "process", "messaging.destination.name": ctx.queue,
                "messaging.message.id": ctx.task_id, "dtq.task.type": ctx.type, "dtq.task.attempt": ctx.attempt,
                "dtq.task.max_attempts": ctx.max_attempts, "dtq.worker.id": ctx.worker_id}) as span:
        yield span


def _failed(span: Any, ctx: TaskContext, exc: BaseException, retryable: bool) -> None:
    outcome = "retry" if retryable and ctx.attempt < ctx.max_attempts else "failed"
    span.set_attribute("dtq.task.outcome", outcome)
    span.record_exception(exc)
    span.set_status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}")


def wrap_sync(ctx: TaskContext, fn: Callable[[Any], Any], retryable: Callable[[BaseException], bool]
              ) -> Callable[[Any], Any]:
    """fn inside a CONSUMER span for this attempt (a sync handler, in its thread)."""
    def traced(payload: Any) -> Any:
        with _processing(ctx) as span:
            try:
                result = fn(payload)
            except BaseException as exc:
                _failed(span, ctx, exc, retryable(exc))
                raise
            span.set_attribute("dtq.task.outcome", "succeeded")
            return result
    return traced


def wrap_async(ctx: TaskContext, fn: Callable[[Any], Awaitable[Any]], retryable: Callable[[BaseException], bool]
               ) -> Callable[[Any], Awaitable[Any]]:
    async def traced(payload: Any) -> Any:
        with _processing(ctx) as span:
            try:
                result = await fn(payload)
            except BaseException as exc:
                _failed(span, ctx, exc, retryable(exc))
                raise
            span.set_attribute("dtq.task.outcome", "succeeded")
            return result
    return traced
