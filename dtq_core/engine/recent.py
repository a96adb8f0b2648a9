"""The recent-tasks listing, merged across partitions: each partition keeps its own index (a zset
of task ids by creation time), and a page is the newest matches of all of them together.

The order is creation time descending, then task id descending byte by byte (the order Redis
keeps members of one score in), a total order across partitions, since ids are unique. The
cursor is the position of the last task shown, "<created ms>-<task id>": the next page starts just
behind it in every partition (scanRecentTasks-1 skips the rest of its millisecond by a binary
search), so a millisecond shared by a batch of tasks is neither skipped nor repeated.

A page is read in rounds, one exchange with Redis per round. The first round asks every partition for a share
of the page; a match is shown only once no partition that has not answered past it could still
hold a newer one, and the next round reads only those partitions. Filters run in Redis (but for
a text with non-ASCII letters, which only Python lower-cases, the script sends the candidates and
the text is matched here: Needle); a round stops asking once the page's scan budget
(reads.SCAN_BUDGET) is spent, and the page then ends with a cursor at the point up to which every
partition was read.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from .. import codec
from ..errors import ValidationError
from ..keys import is_task_id
from . import reads
from .plumbing import Noun
from .reads import SCORE_RE, Page, stream_fields

MAX_CALL = 500  # ids one script call reads at most


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """Where a task sits in the listing: (created ms, id); the listing runs from the greatest."""

    score: int
    task_id: str

    def cursor(self) -> str:
        return f"{self.score}-{self.task_id}"


def parse_cursor(cursor: str | None) -> Position | None:
    """The position a cursor names (None: from the newest); ValidationError for anything else."""
    if not cursor:
        return None
    score, _, task_id = cursor.partition("-")
    if not SCORE_RE.fullmatch(score) or not is_task_id(task_id):
        raise ValidationError("invalid cursor", field="cursor")
    return Position(int(score), task_id)


ID_PREFIX_RE = re.compile(r"[a-z0-9]{1,16}(-[0-9a-f]{0,32})?")
MAX_TEXT = 200


def make_search(*, id_prefix: str | None = None, created_after: Any = None, created_before: Any = None,
                text: str | None = None) -> Search:
    """Check a search's terms (ValidationError naming the field) and turn them into a Search:
    times are ISO-8601 (with a zone, or UTC) or datetimes."""
    if id_prefix and not ID_PREFIX_RE.fullmatch(id_prefix):
        raise ValidationError("id_prefix must be the start of a task id: a partition tag, then '-' and hex digits",
                              field="id_prefix")
    if text is not None and len(text) > MAX_TEXT:
        raise ValidationError(f"q must be at most {MAX_TEXT} characters", field="q")
    after, before = _ms(created_after, "created_after"), _ms(created_before, "created_before")
    if after is not None and before is not None and after > before:
        raise ValidationError("created_after is later than created_before", field="created_after")
    return Search(id_prefix=id_prefix or "", created_after_ms=after, created_before_ms=before,
                  text=(text or "").lower())


def _ms(value: Any, name: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(f"{name} must be an ISO-8601 time, e.g. 2026-12-05T08:00:00Z", field=name) from None
    if not isinstance(value, datetime):
        raise ValidationError(f"{name} must be an ISO-8601 time", field=name)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return int(value.timestamp() * 1000)


@dataclass(frozen=True, slots=True)
class Needle:
    """A search text (lower-cased), found ignoring case in plain texts (an error message) and in
    JSON texts (a payload, the error list). In JSON it is found both as the values read, where a
    quote or backslash is escaped, and as the JSON text reads: that is what the search matched
    before, and an operator may paste a piece of it.

    An ASCII needle is matched in Redis by the scan scripts; any other is matched here, since only
    Python's lower() knows Unicode case (Lua's lowers A-Z only)."""

    text: str
    json_forms: tuple[str, ...] = ()  # how the bodies of JSON strings hold the text, where not as itself

    @classmethod
    def of(cls, text: str) -> Needle:
        # Payloads are written by Python's json (ensure_ascii=False: only quotes, backslashes and
        # control characters escaped), the error list by Redis's cjson, which also escapes / and DEL.
        python = codec.dumps(text)[1:-1]
        cjson = python.replace("/", "\\/").replace("\x7f", "\\u007f")
        return cls(text, tuple(form for form in dict.fromkeys((python, cjson)) if form != text))

    @property
    def in_redis(self) -> bool:
        return self.text.isascii()

    def script_args(self) -> list[str]:
        """A scan script's text arguments: the needle, then its JSON forms; [""] (no text filter)
        for a needle matched here, on the records the script sends."""
        return [self.text, *self.json_forms] if self.in_redis else [""]

    def found(self, *, plain: str = "", json: Iterable[str | None] = ()) -> bool:
        """Whether the needle is in the plain text or in one of the JSON texts, ignoring case."""
        if self.text in plain.lower():
            return True
        forms = (self.text, *self.json_forms)
        return any(form in lowered for lowered in (value.lower() for value in json if value) for form in forms)


@dataclass(frozen=True, slots=True)
class Search:
    """What a search adds to the listing's filters (Tasks.list checks them): an id prefix, a
    creation time range (ms, both ends included) and a text (lower-cased) the payload or an error
    contains."""

    id_prefix: str = ""
    created_after_ms: int | None = None
    created_before_ms: int | None = None
    text: str = ""


@dataclass(slots=True)
class _Walk:
    """One partition's walk down its index: `upper` is the last id it examined (everything newer
    has been read), `matches` what it found and the page has not shown yet."""

    tag: str
    upper: Position | None
    matches: deque[tuple[Position, dict[str, Any]]] = field(default_factory=deque)
    done: bool = False  # it examined its oldest id

    @property
    def blocking(self) -> bool:
        """It may still hold matches newer than any it has found: it has to be read again."""
        return not self.done and not self.matches


class RecentTasks(Noun):
    """One page of the merged recent-tasks listing (Tasks.list checks the filters)."""

    def page(self, tags: Sequence[str], *, queue: str | None, status: str | None, type: str | None,
             start: Position | None, limit: int, periodic_name: str | None = None,
             search: Search | None = None) -> Page:
        target = limit + 1  # one match past the page says whether an older page exists
        search = search or Search()
        filtering = bool(queue or status or type or periodic_name or search.id_prefix or search.text)
        walks = [_Walk(tag, start) for tag in tags]
        shown: list[tuple[Position, dict[str, Any]]] = []
        scanned = 0
        while True:
            newest = self._show(walks, shown, target)
            if len(shown) >= target:
                break
            readers = [w for w in walks if w.blocking and (newest is None or w.upper is None or w.upper > newest)]
            # The first round reads every partition, whatever the budget: each page moves on.
            if not readers or (scanned >= reads.SCAN_BUDGET and scanned > 0):
                break
            remaining = target - len(shown)
            wanted = min(remaining, max(1, math.ceil(2 * remaining / len(readers))))
            count = max(1, min(MAX_CALL, (reads.SCAN_BUDGET - scanned) // len(readers))) if filtering else wanted
            scanned += self._read(readers, queue=queue, status=status, type=type, count=count, wanted=wanted,
                                  periodic_name=periodic_name, search=search)
        if len(shown) > limit:
            return Page(items=[view for _, view in shown[:limit]], next_cursor=shown[limit - 1][0].cursor(),
                        examined=scanned)
        # Stopped on the budget: every partition was read down to the newest of the walks still
        # blocking, and everything newer that matched is on this page.
        stopped = [w.upper for w in walks if w.blocking and w.upper is not None]
        return Page(items=[view for _, view in shown], next_cursor=max(stopped).cursor() if stopped else None,
                    stopped_early=bool(stopped), examined=scanned)

    @staticmethod
    def _show(walks: list[_Walk], shown: list[tuple[Position, dict[str, Any]]], target: int) -> Position | None:
        """Move to the page every found match no blocking walk can outrank, newest first; return
        the newest match still held back (None: none)."""
        while True:
            holding = [w for w in walks if w.matches]
            if not holding:
                return None
            best = max(holding, key=lambda w: w.matches[0][0])
            newest = best.matches[0][0]
            if len(shown) >= target or any(w.blocking and (w.upper is None or w.upper > newest) for w in walks):
                return newest
            shown.append(best.matches.popleft())

    def _read(self, walks: list[_Walk], *, queue: str | None, status: str | None, type: str | None,
              count: int, wanted: int, periodic_name: str | None = None, search: Search | None = None) -> int:
        """One round: a scanRecentTasks call per walk, in one exchange; returns the ids examined."""
        search = search or Search()
        needle = Needle.of(search.text)
        if not needle.in_redis:  # matched here: the script must not stop at `wanted` candidates
            wanted = count
        newest = "+inf" if search.created_before_ms is None else search.created_before_ms
        oldest = "-inf" if search.created_after_ms is None else search.created_after_ms
        replies = self.scripts.call_direct_many([("scanRecentTasks", [self.keys.partition(w.tag)], [
            newest if w.upper is None else w.upper.score, "" if w.upper is None else w.upper.task_id, count,
            queue or "", status or "", type or "", wanted, reads.SCAN_CALL_BYTES, periodic_name or "",
            search.id_prefix, oldest, *needle.script_args()])
            for w in walks])
        examined = 0
        for w, reply in zip(walks, replies, strict=True):
            if isinstance(reply, Exception):
                raise reply
            seen, reached_end, last_score, last_id, matches = reply
            examined += int(seen)
            for task_id, score, record in matches:
                fields = stream_fields(record)
                if not needle.in_redis and not _has_text(fields, needle):
                    continue
                w.matches.append((Position(int(float(score)), str(task_id)),
                                  codec.task_view(fields, task_id=str(task_id))))
            if last_id:
                w.upper = Position(int(float(last_score)), str(last_id))
            w.done = int(reached_end) == 1
        return examined


def _has_text(task: dict[str, str], needle: Needle) -> bool:
    """Whether a task's payload, last error or error list holds the text, as scanRecentTasks
    tells for an ASCII needle."""
    return needle.found(plain=task.get("last_error", ""), json=(task.get("payload"), task.get("errors")))
