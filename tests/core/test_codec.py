"""Result encoding: total (never raises), strict JSON, and truncation that fits its byte limit."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dtq_core.codec import encode_result, task_view, truncate_result


class Broken:
    def __str__(self) -> str:
        raise ValueError("no str")

    def __repr__(self) -> str:
        raise ValueError("no repr")


def strict(text: str) -> Any:
    def refuse(constant: str) -> Any:
        raise ValueError(constant)

    return json.loads(text, parse_constant=refuse)


def nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("value", "expected"), [
    (None, None),
    ({"rows": 120, "name": "café"}, {"rows": 120, "name": "café"}),
    ({1: (2, 3)}, {"1": [2, 3]}),
    ({(1, 2): 3}, "{(1, 2): 3}"),
    (float("nan"), "nan"),
    ([float("inf")], "[inf]"),
    (b"caf\xe9".decode(errors="surrogateescape"), "caf?"),
])
def test_it_encodes_any_value_as_strict_json(value: Any, expected: Any) -> None:
    assert strict(encode_result(value)) == expected


def test_it_encodes_values_json_cannot_walk() -> None:
    loop: list[Any] = []
    loop.append(loop)
    assert strict(encode_result(loop)) == "[[...]]"
    assert isinstance(strict(encode_result(nested(100_000))), str)  # too deep for json and for str()
    # default=str raises, then str() and repr() do: object.__repr__ is left
    assert strict(encode_result({"when": Broken()})).startswith("<dict object at")


@pytest.mark.parametrize("text", ['"' * 300, "\\" * 300, "é" * 300, "😀" * 300, "\x01" * 300, 'a"\\é\n' * 100])
@pytest.mark.parametrize("max_bytes", [2, 3, 7, 64, 199, 200, 201])
def test_a_cut_result_stays_json_within_the_limit(text: str, max_bytes: int) -> None:
    encoded = encode_result(text)
    cut, truncated = truncate_result(encoded, max_bytes)
    assert truncated and len(cut.encode()) <= max_bytes
    head = strict(cut)
    assert isinstance(head, str) and encoded.startswith(head)
    # the longest head that fits: one more character would not
    assert len(json.dumps(encoded[:len(head) + 1], ensure_ascii=False).encode()) > max_bytes


def test_a_result_within_the_limit_is_kept_as_is() -> None:
    encoded = encode_result({"a": "é" * 10})
    assert truncate_result(encoded, len(encoded.encode())) == (encoded, False)


def test_a_stored_result_with_nan_reads_as_its_text() -> None:
    # Older versions stored NaN/Infinity, which the API's strict JSON renderer cannot write.
    assert task_view({}, '{"x":NaN}')["result"] == '{"x":NaN}'
    assert task_view({}, "[1.5]")["result"] == [1.5]


def test_a_stored_value_too_deep_to_parse_reads_as_its_text() -> None:
    # Submit refuses such a payload now (MAX_JSON_DEPTH); one stored before, or a handler's
    # result, must not make the task unreadable (RecursionError: a 500 on its page and the API).
    deep = "[" * 5000 + "]" * 5000
    shown = task_view({"payload": deep}, deep)
    assert (shown["payload"], shown["result"]) == (deep, deep)
