"""Batch submit: validate every item on its own, enqueue the valid ones in one pipeline."""

from __future__ import annotations

from typing import Any

from dtq_core.connection import UNAVAILABLE_ERRORS, never_connected
from dtq_core.engine import Engine
from dtq_core.engine.tasks import failed_in_redis
from dtq_core.errors import DtqError, QueueFull, QueueLimitReached, ValidationError, error_body
from dtq_core.redis_errors import translate
from dtq_core.submit import Submission

from .exceptions import _flatten
from .shapes import submit_errors


def _validate(engine: Engine, item: Any, request_id: str) -> Submission | dict[str, Any]:
    options, errors = submit_errors(item, strict_json=True)  # batch_items checked every item
    if options is None:
        message, _ = _flatten(errors)
        return error_body(ValidationError(message), request_id)
    try:
        return engine.tasks.validate(request_id=request_id, **options)
    except DtqError as exc:
        return error_body(exc, request_id)


def submit_batch(engine: Engine, items: list[Any], request_id: str) -> list[dict[str, Any]]:
    """Return one result per item, in order: {"id", "status", "created"} or {"error": {...}}.

    Redis trouble raises, and the whole request gets the API's 503 envelope (exception_handler),
    when no task is known to have landed: Redis did not answer at all, or failed every call. When
    some landed (a Redis Cluster with one master down, a task's own command refused), each failed
    item gets that error as its result and the others their ids: a 503 would have the client
    send the landed ones again."""
    checked = [_validate(engine, item, request_id) for item in items]
    valid = [c for c in checked if isinstance(c, Submission)]
    outcomes_list = engine.tasks.enqueue_each(valid) if valid else []
    failed = [o for o in outcomes_list if failed_in_redis(o)]
    if failed and len(failed) == len(outcomes_list):
        # Redis trouble first: a 503 the client may retry, not a 500 for a by-stander's error.
        raise next((f for f in failed if translate(f) is not None), failed[0])
    outcomes = iter(outcomes_list)
    results: list[dict[str, Any]] = []
    for c in checked:
        if not isinstance(c, Submission):
            results.append(c)
            continue
        outcome = next(outcomes)
        if isinstance(outcome, (QueueFull, QueueLimitReached)):
            results.append(error_body(outcome, request_id))
        elif isinstance(outcome, Exception):
            results.append(_redis_error(outcome, request_id))
        else:
            results.append({"id": outcome.id, "status": outcome.status, "created": outcome.created})
            if outcome.unique is not None:
                results[-1]["unique"] = outcome.unique
    return results


def _redis_error(exc: Exception, request_id: str) -> dict[str, Any]:
    """An item's result for a call Redis failed: the API's envelope for that trouble, saying
    whether the task may have been queued all the same (a master that stopped answering may have
    run the call before it stopped; a refused connection, a refused write or an error reply did
    not run it)."""
    trouble = translate(exc)
    if trouble is None:  # an error reply dtq does not expect (a key of the wrong type, set by hand)
        return {"error": {"code": "INTERNAL_ERROR", "message": f"Redis failed this task's write: {exc}",
                          "request_id": request_id}}
    body = error_body(trouble, request_id)
    if never_connected(exc):
        body["error"]["message"] += "; this task was not queued (Redis refused the connection): send it again"
    elif isinstance(exc, UNAVAILABLE_ERRORS):
        body["error"]["message"] += (
            "; this task may or may not have been queued: send it again with an idempotency_key "
            "to be sure it is queued once")
    return body
