"""Sentry (docs/observability.md, "Sentry"): a handler's failure captured once per attempt that
ends in error, with the task's id, type, queue and attempt as tags, its payload (capped) as the
"dtq task" context, and a fingerprint per task type and error class, so the retries of one task,
and of many, group into one issue. By default an attempt that will be retried is not reported:
only a permanent failure and the attempt that dead-letters (DTQ_SENTRY_REPORT_RETRIES=true reports
every failing attempt). The project's sentry_sdk.init(...) (its DSN, before_send scrubbing,
sampling) applies; DTQ_SENTRY=off turns it off; without sentry-sdk, or before init, it is off.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..config import DtqConfig

PAYLOAD_MAX = 2048  # bytes of the payload's JSON sent with an event


def active(config: DtqConfig) -> bool:
    """sentry_sdk is imported by the project and initialised, and DTQ_SENTRY is not "off"."""
    sdk = sys.modules.get("sentry_sdk")
    return sdk is not None and config.sentry != "off" and sdk.get_client().is_active()


def report(config: DtqConfig, *, task_id: str, type: str, queue: str, attempt: int, max_attempts: int,
           payload: str, exc: BaseException, ends_task: bool) -> None:
    """Capture exc for this attempt when it ends the task (permanent, or its last attempt), or
    when retries are reported too."""
    if not (ends_task or config.sentry_report_retries) or not active(config):
        return
    import sentry_sdk  # optional: only here, once active() saw the project initialise it

    shown = "encrypted" if payload.startswith('"dtq-encrypted:') else payload
    if len(shown.encode()) > PAYLOAD_MAX:
        shown = shown.encode()[:PAYLOAD_MAX].decode(errors="ignore") + "…"
    error_class = type_name(exc)
    with sentry_sdk.new_scope() as scope:
        scope.set_tag("dtq.task_id", task_id)
        scope.set_tag("dtq.task_type", type)
        scope.set_tag("dtq.queue", queue)
        scope.set_tag("dtq.attempt", str(attempt))
        scope.set_context("dtq task", {"task_id": task_id, "type": type, "queue": queue, "attempt": attempt,
                                       "max_attempts": max_attempts, "final": ends_task, "payload": shown})
        scope.fingerprint = ["dtq", type, error_class]
        sentry_sdk.capture_exception(exc)


def type_name(exc: BaseException) -> str:
    cls: Any = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"
