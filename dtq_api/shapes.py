"""The shape checks of the submit bodies, in plain Python: what SubmitSerializer and
BatchSerializer check, with the same errors, at a fraction of the cost.

A DRF serializer deep-copies its declared fields on every instance: about 40 µs per submit body,
more than the rest of the submit path, and a batch made one per item. The serializers stay as the
OpenAPI description of the bodies; tests/api/test_shapes.py holds both to the same answers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ErrorDetail, ValidationError

from .serializers import SUBMIT_FIELDS

BATCH_MAX = 1000
REQUIRED = ErrorDetail("This field is required.", code="required")
NULL = ErrorDetail("This field may not be null.", code="null")
NOT_OBJECT = ErrorDetail("expected a JSON object", code="invalid")
UNKNOWN = ErrorDetail("unknown field", code="invalid")
NO_DATA = ErrorDetail("No data provided", code="null")
INVALID_JSON = ErrorDetail("Value must be valid JSON.", code="invalid")
# Submit fields that may be null (null is "not given"), and each optional field's default.
NULLABLE = frozenset(("payload", "delay_seconds", "ttl_seconds", "max_attempts", "timeout_seconds",
                      "idempotency_key", "group_key", "unique_key", "unique_mode", "unique_window_s", "headers"))
DEFAULTS: dict[str, Any] = {"queue": "default", "priority": "normal", "delay_seconds": 0, "ttl_seconds": None,
                            "max_attempts": None, "timeout_seconds": None, "idempotency_key": None,
                            "group_key": None, "unique_key": None, "unique_mode": None, "unique_window_s": None,
                            "headers": None}
_FIELDS = frozenset(SUBMIT_FIELDS)


def submit_errors(data: Any, *, strict_json: bool = False
                  ) -> tuple[dict[str, Any] | None, dict[str, list[ErrorDetail]] | None]:
    """(the submit options, None) or (None, the errors as SubmitSerializer.errors has them).

    strict_json: the caller has checked the whole body is JSON without NaN or infinities
    (batch_items does, for every item at once)."""
    if data is None:
        return None, {"non_field_errors": [NO_DATA]}
    if not isinstance(data, dict):
        return None, {"non_field_errors": [NOT_OBJECT]}
    if not _FIELDS.issuperset(data):
        return None, {name: [UNKNOWN] for name in sorted(set(data) - _FIELDS)}
    errors: dict[str, list[ErrorDetail]] = {}
    strict_json = strict_json or _strict_json(data)  # one check of the whole, not one per field
    for name in SUBMIT_FIELDS:  # declaration order, as DRF reports them
        if name not in data:
            if name == "type":
                errors[name] = [REQUIRED]
        elif data[name] is None:
            if name not in NULLABLE:
                errors[name] = [NULL]
        elif not strict_json and not _strict_json(data[name]):
            errors[name] = [INVALID_JSON]
    if errors:
        return None, errors
    options = {**DEFAULTS, **data}
    if "payload" not in data:
        options["payload"] = {}
    return options, None


def submit_options(data: Any) -> dict[str, Any]:
    """The submit options of a body; raise DRF's ValidationError as is_valid(raise_exception=True) would."""
    options, errors = submit_errors(data)
    if errors is not None:
        raise ValidationError(errors)
    assert options is not None
    return options


def batch_items(data: Any) -> list[Any]:
    """The items of a batch body; raise DRF's ValidationError as BatchSerializer would."""
    if data is None:
        raise ValidationError({"non_field_errors": [NO_DATA]})
    if not isinstance(data, dict):
        raise ValidationError({"non_field_errors": [NOT_OBJECT]})
    if data.keys() - {"tasks"}:
        raise ValidationError({name: [UNKNOWN] for name in sorted(data.keys() - {"tasks"})})
    if "tasks" not in data:
        raise ValidationError({"tasks": [REQUIRED]})
    items = data["tasks"]
    if items is None:
        raise ValidationError({"tasks": [NULL]})
    if isinstance(items, (str, Mapping)) or not hasattr(items, "__iter__"):
        raise ValidationError({"tasks": [ErrorDetail(f'Expected a list of items but got type "{type(items).__name__}".',
                                                     code="not_a_list")]})
    items = list(items)
    if len(items) > BATCH_MAX:
        raise ValidationError({"tasks": [ErrorDetail(f"Ensure this field has no more than {BATCH_MAX} elements.",
                                                     code="max_length")]})
    strict_json = _strict_json(items)  # one check of the whole list, not one per item
    wrong = {i: [NULL if item is None else INVALID_JSON] for i, item in enumerate(items)
             if item is None or not (strict_json or _strict_json(item))}
    if wrong:
        raise ValidationError({"tasks": wrong})  # type: ignore[dict-item]  # keyed by index, as ListField's
    return items


def _strict_json(value: Any) -> bool:
    """What JSONField checks: the value is JSON without NaN or infinities. A parsed body can
    hold an infinity (1e400 parses as one), never a type JSON lacks."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, (list, dict)):
        try:
            json.dumps(value, allow_nan=False)
        except ValueError:
            return False
    return True
