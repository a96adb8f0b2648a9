"""The DLQ as one list over many partitions: a merged, filtered walk newest first.

Each partition has its own DLQ stream. The merged order is by entry id time, then partition
tag, then the entry's sequence number, newest first: within one partition that is the stream's
own order, and across partitions it is total, so a cursor (the Position of the last entry a page
covered) says exactly where the next page starts in every partition, however entries of one
millisecond are spread over them.

A walk reads the partitions in rounds, one pipelined round trip each; a round reads only the
partitions that may still hold an entry of the page (those whose walk has not yet passed the
page's last match), through scanDeadLetters, which filters in Redis. An entry is settled once
every partition still being read has been read down to it: the settled matches, in order, are
what a page may show.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..errors import ValidationError
from ..keys import Keys, dlq_ref, parse_dlq_ref
from ..scripts import Scripts
from . import reads
from .reads import MAX_ID_PART, id_parts, stream_fields, valid_stream_id
from .recent import Needle

CALL_COUNT = 500  # entries one scan script call reads at most
GROUP_MESSAGE_CHARS = 200


def group_message(error: str | None) -> str:
    """The message an error group is known by: the error's first line, bounded, so tracebacks and
    long messages still group together."""
    lines = (error or "").strip().splitlines()
    return lines[0][:GROUP_MESSAGE_CHARS] if lines else ""


def group_key(f: dict[str, str]) -> tuple[str, str, str]:
    """The error group of a dead letter (its fields): type, error class and message. The groups
    /dlq/ shows and the group filter its actions use are both this, so "the group" is one set."""
    return f.get("type") or "", f.get("error_class") or "", group_message(f.get("error"))


@dataclass(frozen=True, order=True, slots=True)
class Position:
    """A dead letter's place in the merged order (compare: the newer is the greater)."""

    ms: int
    tag: str
    seq: int

    @classmethod
    def of(cls, tag: str, entry_id: str) -> Position:
        ms, seq = id_parts(entry_id)
        return cls(ms=ms, tag=tag, seq=seq)

    @classmethod
    def from_ref(cls, ref: object) -> Position | None:
        """The position a dead letter's API id (keys.dlq_ref) names; None when it names none."""
        parsed = parse_dlq_ref(ref) if isinstance(ref, str) else None
        if parsed is None or not valid_stream_id(parsed[1]):
            return None
        return cls.of(*parsed)

    @property
    def entry_id(self) -> str:
        return f"{self.ms}-{self.seq}"

    @property
    def ref(self) -> str:
        return dlq_ref(self.tag, self.entry_id)

    def bound_below(self, tag: str) -> str | None:
        """The XREVRANGE upper bound of partition `tag` for the entries after this position in
        the merged order (older ones); None when that partition has none."""
        if tag > self.tag:  # at this millisecond, its entries come before ours: older milliseconds only
            return f"({self.ms}-0" if self.ms > 0 else None
        if tag == self.tag:
            return f"({self.entry_id}" if (self.ms, self.seq) != (0, 0) else None
        return f"{self.ms}-{MAX_ID_PART}"  # at this millisecond, its entries come after ours


def parse_cursor(cursor: str | None) -> Position | None:
    """A page cursor (the Position of the last entry the previous page covered); an unparsable
    one is a 400, not a 500."""
    if not cursor:
        return None
    position = Position.from_ref(cursor)
    if position is None or (position.ms, position.seq) == (0, 0):  # no page ever ends there
        raise ValidationError("invalid cursor", field="cursor")
    return position


@dataclass(frozen=True, kw_only=True, slots=True)
class Filters:
    queue: str | None = None
    type: str | None = None
    q: str | None = None
    # One error group (group_key) with type: None is any, "" is exactly empty.
    error_class: str | None = None
    message: str | None = None

    @property
    def narrows(self) -> bool:
        """Whether entries of a partition may not match (a partition holds one queue)."""
        return bool(self.type or self.q) or self.error_class is not None or self.message is not None


@dataclass(slots=True)
class _Lane:
    """One partition's part of a walk."""

    tag: str
    upper: str | None  # the next XREVRANGE bound; None: nothing left below
    position: Position | None = None  # the last entry examined
    matched: int = 0

    @property
    def active(self) -> bool:
        return self.upper is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class Walk:
    matches: list[tuple[Position, dict[str, str]]]  # settled matches, newest first
    unsettled: int  # matches examined past the frontier (read, but not in `matches`)
    frontier: Position | None  # every entry at or above it was examined; None: every entry was
    lanes_left: list[tuple[str, str]]  # (tag, bound) of partitions not read to their end


@dataclass(kw_only=True, slots=True)
class Walker:
    """Walk the DLQs of the given partitions down from a cursor."""

    keys: Keys
    scripts: Scripts
    client: Any  # redis.Redis (or a cluster client): one pipeline per round
    tags: Iterable[str]
    below: Position | None = None
    filters: Filters = field(default_factory=Filters)

    def walk(self, *, limit: int, budget: int) -> Walk:
        """Read until `limit` matches are settled, `budget` entries have been examined, or every
        partition is read to its end.

        A needle with non-ASCII characters is matched here instead of in Redis (Python's lower(),
        which Lua's cannot match), on the payloads the script returns with the entries that pass
        the other filters. So is a group's message: the script keeps the errors that hold it, and
        group_message says which of them it is the message of.
        """
        below = self.below
        lanes = [_Lane(tag=tag, upper=below.bound_below(tag) if below else "+") for tag in self.tags]
        needle = Needle.of((self.filters.q or "").lower())
        in_redis = needle.in_redis
        flt = self.filters
        settled_in_redis = in_redis and flt.message is None  # each match the script returns is one
        pool: list[tuple[Position, dict[str, str]]] = []
        scanned = rounds = 0
        while True:
            pool.sort(key=lambda m: m[0], reverse=True)
            frontier = _frontier(lanes)
            settled = sum(1 for pos, _ in pool if frontier is None or pos >= frontier)
            if settled >= limit or frontier is None or (rounds and scanned >= budget):
                break
            rounds += 1
            # A partition whose walk passed the limit-th match holds nothing more for this page.
            cut = pool[limit - 1][0] if len(pool) >= limit else None
            needed = [lane for lane in lanes if lane.active
                      and (cut is None or lane.position is None or lane.position > cut)]
            share = math.ceil((limit - settled) / len(needed))
            counts = _split(budget - scanned, len(needed))
            pipe = self.client.pipeline(transaction=False)
            asked = []
            for lane, count in zip(needed, counts, strict=True):
                wanted = min(limit - lane.matched, share) if settled_in_redis else count
                if not flt.narrows:  # each entry matches:
                    count = min(count, wanted)  # read no more than the page can show
                text, *json_forms = needle.script_args()
                self.scripts("scanDeadLetters", keys=[self.keys.partition(lane.tag)], client=pipe, args=[
                    lane.upper, count, flt.queue or "", flt.type or "",
                    text, 0 if in_redis else 1, wanted, reads.SCAN_CALL_BYTES,
                    0 if flt.error_class is None else 1, flt.error_class or "", flt.message or "", *json_forms])
                asked.append((lane, count))
            for (lane, count), reply in zip(asked, self.scripts.execute(pipe), strict=True):
                examined, last, found, read = reply
                scanned += int(examined)
                if last:
                    lane.position = Position.of(lane.tag, last)
                    lane.upper = "(" + last
                if int(examined) == int(read) < count:  # it passed the partition's oldest entry
                    lane.upper = None
                for eid, raw, payload in found:
                    f = stream_fields(raw)
                    if flt.message is not None and group_message(f.get("error")) != flt.message:
                        continue
                    if not in_redis and not needle.found(plain=f.get("error", "") + " " + f.get("error_class", ""),
                                                         json=(payload,)):
                        continue
                    pool.append((Position.of(lane.tag, eid), f))
                    lane.matched += 1
        matches = [m for m in pool if frontier is None or m[0] >= frontier]
        return Walk(matches=matches, unsettled=len(pool) - len(matches), frontier=frontier,
                    lanes_left=[(lane.tag, lane.upper) for lane in lanes if lane.upper is not None])


def _frontier(lanes: list[_Lane]) -> Position | None:
    """The newest place a partition still being read has got to: every entry at or above it has
    been examined. None when every partition is read to its end."""
    frontier: Position | None = None
    for lane in lanes:
        if not lane.active:
            continue
        if lane.position is None:
            return Position(ms=MAX_ID_PART, tag="~", seq=MAX_ID_PART)  # not read yet: nothing is settled
        if frontier is None or lane.position > frontier:
            frontier = lane.position
    return frontier


def _split(total: int, parts: int) -> list[int]:
    """`total` entries to examine shared among `parts` partitions: each at least one (so every
    partition read has a position) and at most CALL_COUNT."""
    base, extra = divmod(max(total, parts), parts)
    return [min(CALL_COUNT, base + (1 if i < extra else 0)) for i in range(parts)]
