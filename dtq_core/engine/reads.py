"""What the engine's read models share: the Page they return, page and scan budgets, cursor
and filter checks. Every listing costs a bounded number of round trips however large the data."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError
from ..task import TASK_TYPE_RE, valid_queue_name

MAX_PAGE = 500
SCAN_BUDGET = 5000  # entries examined per filtered page before returning a cursor
SCAN_CALL_BYTES = 1 << 20  # text one scan script call looks at or returns: it holds Redis meanwhile
STREAM_ID_RE = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
MAX_ID_PART = 2**64 - 1
SCORE_RE = re.compile(r"[0-9]{1,20}")  # str.isdigit() accepts "²", which Redis rejects
TASK_ID_RE = re.compile(r"[0-9A-Za-z_.-]{1,128}")  # ids dtq makes are 32 hex digits


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None
    # A filtered walk that spent its scan budget before filling the page: the page holds every match
    # newer than next_cursor, and older ones may match (the listing says so, with a link to go on).
    stopped_early: bool = False
    examined: int | None = None  # ids the filtered walk examined for this page


def stream_fields(flat: list[Any] | dict[str, Any]) -> dict[str, str]:
    if isinstance(flat, dict):
        return flat
    return dict(zip(flat[::2], flat[1::2], strict=False))


def valid_stream_id(value: object) -> bool:
    """Say whether value is a full stream entry id ("<ms>-<seq>", each part a 64-bit unsigned
    number), the only form Redis accepts here."""
    if not isinstance(value, str) or STREAM_ID_RE.fullmatch(value) is None:
        return False
    return all(part <= MAX_ID_PART for part in id_parts(value))


def stream_cursor(cursor: str | None) -> str | None:
    # An unparsable id would make XRANGE fail with a ResponseError (a 500): refuse it as bad input.
    # So would "(0-0" as the exclusive end of a walk down; no page ever ends there.
    if cursor and (not valid_stream_id(cursor) or id_parts(cursor) == (0, 0)):
        raise ValidationError("invalid cursor", field="cursor")
    return cursor or None


def id_parts(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def queue_filter(queue: str | None) -> str | None:
    """A queue filter names a possible queue: a typo is a 400, not an empty page."""
    if queue and not valid_queue_name(queue):
        raise ValidationError("queue must match [a-z0-9][a-z0-9_-]{0,63} (and not be dlq or audit)", field="queue")
    return queue or None


def type_filter(type: str | None) -> str | None:
    """A task-type filter names a possible type (what submit accepts)."""
    if type and not TASK_TYPE_RE.fullmatch(type):
        raise ValidationError("type must be 1-200 characters of letters, digits and _ . : -", field="type")
    return type or None


def page_limit(limit: int | None, default: int = 50) -> int:
    if limit is None:
        return default
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValidationError(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    return limit
