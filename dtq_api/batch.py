"""Batch submit: validate every item on its own, enqueue the valid ones in one pipeline."""

from __future__ import annotations

from typing import Any

from dtq_core.engine import Engine
from dtq_core.errors import DtqError, QueueFull, QueueLimitReached, ValidationError, error_body
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

    Redis trouble is not an item's error: it propagates, and the whole request gets the API's
    503 envelope (exception_handler), since nothing of the pipeline can be said to have landed."""
    checked = [_validate(engine, item, request_id) for item in items]
    valid = [c for c in checked if isinstance(c, Submission)]
    outcomes = iter(engine.tasks.enqueue_many(valid) if valid else [])
    results: list[dict[str, Any]] = []
    for c in checked:
        if not isinstance(c, Submission):
            results.append(c)
            continue
        outcome = next(outcomes)
        if isinstance(outcome, (QueueFull, QueueLimitReached)):
            results.append(error_body(outcome, request_id))
        else:
            results.append({"id": outcome.id, "status": outcome.status, "created": outcome.created})
            if outcome.unique is not None:
                results[-1]["unique"] = outcome.unique
    return results
