"""dtq_api.shapes answers every body exactly as the DRF serializers that describe it in the schema."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.exceptions import ValidationError

from dtq_api.serializers import SUBMIT_FIELDS, BatchSerializer, SubmitSerializer
from dtq_api.shapes import batch_items, submit_errors

# Infinities included: a body's 1e400 parses as one.
JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                    max_leaves=6)
BODY = st.one_of(JSON, st.dictionaries(st.sampled_from([*SUBMIT_FIELDS, "extra", "Type"]), JSON, max_size=6))


def plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def drf_submit(body: Any) -> tuple[Any, Any]:
    s = SubmitSerializer(data=body)
    return (dict(s.validated_data), None) if s.is_valid() else (None, plain(s.errors))


def drf_batch(body: Any) -> tuple[Any, Any]:
    s = BatchSerializer(data=body)
    return (list(s.validated_data["tasks"]), None) if s.is_valid() else (None, plain(s.errors))


def fast_batch(body: Any) -> tuple[Any, Any]:
    try:
        return batch_items(body), None
    except ValidationError as exc:
        return None, plain(exc.detail)


EDGE_SUBMITS = [None, 1, "x", [], {}, {"type": None}, {"type": "a", "payload": None}, {"queue": None},
                {"type": "a", "queue": None, "priority": None}, {"type": "a", "zz": 1, "aa": 2},
                {"type": "a", **{name: None for name in SUBMIT_FIELDS[1:]}},
                {"type": float("inf"), "payload": {"x": [1, float("-inf")]}, "delay_seconds": float("inf")}]
EDGE_BATCHES = [None, 1, "ab", [], {}, {"tasks": None}, {"tasks": "ab"}, {"tasks": {}}, {"tasks": 5},
                {"tasks": []}, {"tasks": [1, None, {}, None]}, {"tasks": [{}] * 1001}, {"tasks": [{}] * 1000},
                {"x": 1, "tasks": []}, {"b": 1, "a": 2}]


def test_edge_cases_answer_as_the_serializers() -> None:
    for body in EDGE_SUBMITS:
        options, errors = submit_errors(body)
        assert (options, plain(errors) if errors else None) == drf_submit(body), body
    for body in EDGE_BATCHES:
        assert fast_batch(body) == drf_batch(body), str(body)[:100]


@settings(max_examples=300, deadline=None)
@given(BODY)
def test_any_submit_body_answers_as_the_serializer(body: Any) -> None:
    options, errors = submit_errors(body)
    assert (options, plain(errors) if errors else None) == drf_submit(body)


@settings(max_examples=200, deadline=None)
@given(st.one_of(JSON, st.fixed_dictionaries({"tasks": st.lists(BODY, max_size=4)}),
                 st.dictionaries(st.sampled_from(["tasks", "task", "x"]), JSON, max_size=2)))
def test_any_batch_body_answers_as_the_serializer(body: Any) -> None:
    assert fast_batch(body) == drf_batch(body)
