"""Redis replies typed as dtq's clients get them.

redis-py types a string reply `bytes | str`: which one depends on the client's decode_responses,
which its types do not follow. Every client dtq makes decodes (`connection.py`: sync_client,
async_client), so a string reply is a str; these name that once instead of a cast at each call.
They return the reply itself: nothing is converted or checked at run time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import cast

from redis.typing import StreamRangeResponse, ZSetRangeResponse


def text(reply: bytes | str) -> str:
    return cast(str, reply)  # decode_responses=True


def optional_text(reply: bytes | str | None) -> str | None:
    return cast("str | None", reply)  # decode_responses=True


def text_list(reply: Iterable[object]) -> list[str]:
    """A list of strings: ZRANGE without scores, LRANGE, HMGET of fields that exist."""
    return cast("list[str]", reply)  # a list reply, of decoded strings


def optional_text_list(reply: list[bytes | str | None]) -> list[str | None]:
    """HMGET's values, None for a field that does not exist."""
    return cast("list[str | None]", reply)  # decode_responses=True


def scored(reply: ZSetRangeResponse) -> list[tuple[str, float]]:
    """ZRANGE/ZREVRANGE WITHSCORES (RESP2: redis-py makes each pair a tuple, the score a float)."""
    return cast("list[tuple[str, float]]", reply)  # withscores=True and decode_responses=True


def text_set(reply: set[bytes | str]) -> set[str]:
    return cast("set[str]", reply)  # decode_responses=True


def text_hash(reply: Mapping[bytes | str, bytes | str]) -> dict[str, str]:
    """HGETALL's field -> value."""
    return cast("dict[str, str]", reply)  # a dict reply, of decoded strings


def entries(reply: StreamRangeResponse | None) -> list[tuple[str, dict[str, str]]]:
    """XRANGE/XREVRANGE's (entry id, fields) pairs; a range reply is a list, never None."""
    return cast("list[tuple[str, dict[str, str]]]", reply)  # decode_responses=True
