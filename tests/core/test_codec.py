"""Result encoding: total (never raises) and strict JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from dtq_core.codec import encode_result


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
