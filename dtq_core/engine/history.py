"""Task history series: what GET /api/v1/stats returns and the console's charts draw (issue 24).

Where a series is read from (dtq_core/history.py says what the hashes hold):
- a queue (with or without a type): its partitions' own history, summed;
- a type across queues: the leader's "types" roll-up; everything: the "all" roll-up;
- depth: the leader's per-minute samples ("depth" roll-up).
Ranges of 24 h and less read minutes; longer ones read hours, and minutes for the hours the
leader has not folded yet (the current one, or more while no leader runs), never minutes older
than they can live: while no leader runs, a 30-day range reads about a day of minutes, not 30.
One pipelined round trip for the counts, one for the depth.
"""

from __future__ import annotations

from typing import Any

from ..clock import iso
from ..errors import QueueNotFound, ValidationError
from ..history import (
    DAY_S,
    HOUR_S,
    MAX_POINTS,
    MINUTE_S,
    MINUTE_TTL_MS,
    OUTCOMES,
    PERCENTILES,
    RANGES,
    Tally,
    add_by_type,
    percentile,
    tally_fields,
    to_int,
)
from ..replies import text_hash
from ..task import QUEUE_NAME_RE, TASK_TYPE_RE
from .plumbing import Noun, Plumbing
from .registry import Registry

MAX_TYPES_SHOWN = 200  # rows of the types table

# How far back a minute hash can still exist (older ones are not read: they expired). A partition's
# minute lives MINUTE_TTL_MS from when its first count was written, in that minute by the writer's
# clock (an hour's slack for skew between that clock and this one). A global roll-up's minute lives
# as long from when the leader wrote it, which is up to a day late when it catches up after a time
# without a leader (dtq_core/worker/history.py, _roll_minutes).
PARTITION_MINUTES_LIVE_S = MINUTE_TTL_MS // 1000 + HOUR_S
ROLLUP_MINUTES_LIVE_S = PARTITION_MINUTES_LIVE_S + DAY_S

Scope = tuple[str, str, int]  # (key prefix, name in the folded record, how long its minutes live in s)


class History(Noun):
    def __init__(self, plumbing: Plumbing, registry: Registry) -> None:
        super().__init__(plumbing)
        self.registry = registry

    def stats(self, range_: str = "1h", *, queue: str | None = None, ttype: str | None = None,
              step: int | None = None, types: bool = True, depth: bool = True) -> dict[str, Any]:
        """The series of one range: counts per outcome, wait and run time percentiles and (for all
        queues or one queue) the waiting tasks, point by point; the range's totals; and, without a
        type, a table of the types seen (the slowest first, by p95 run time)."""
        span, resolution, default_step = _check(range_, queue, ttype, step)
        step = step or default_step
        count = span // step
        now_s = self.redis_now_ms() // 1000  # workers count on Redis's clock, not this host's
        end_s = (now_s // step + 1) * step  # the point holding now is the last
        start_s = end_s - count * step
        scopes = self._scopes(queue, ttype is not None or types)
        # Whole days come from the leader's day folds when a point is a day or more.
        hashes = self._read(scopes, start_s, end_s, resolution, now_s, days=step % DAY_S == 0)
        points = [Tally.empty() for _ in range(count)]
        total = Tally.empty()
        by_type: dict[str, Tally] = {}
        for unit_s, fields in hashes:
            index = (unit_s - start_s) // step
            if not 0 <= index < count:
                continue
            tally = tally_fields(fields, ttype)  # a type's fields, or every field
            points[index].merge(tally)
            total.merge(tally)
            if types and ttype is None:
                add_by_type(by_type, fields)
        series: dict[str, Any] = {"time": [iso((start_s + i * step) * 1000) for i in range(count)]}
        for letter, name in OUTCOMES.items():
            series[name] = [p.outcomes.get(letter, 0) for p in points]
        for name, attr in (("wait_ms", "wait"), ("run_ms", "run")):
            series[name] = {f"p{q}": [_round(percentile(getattr(p, attr), q)) for p in points] for q in PERCENTILES}
        series["depth"] = (self._depth(queue or "*", start_s, end_s, resolution, step, count, now_s)
                           if depth and ttype is None else None)
        out: dict[str, Any] = {"range": range_, "step_s": step, "resolution_s": resolution,
                               "start": iso(start_s * 1000), "end": iso(end_s * 1000),
                               "queue": queue, "type": ttype, "totals": total.summary(), "series": series}
        if ttype is None and types:
            out["types"] = _types_table(by_type)
        return out

    def _scopes(self, queue: str | None, by_type: bool) -> list[Scope]:
        """Every history the series sums."""
        k = self.keys
        if queue is not None:
            layout = self.registry.layouts(fresh=True).get(queue)
            if layout is None:
                raise QueueNotFound(f"queue {queue!r} not found", queue=queue)
            return [(k.history(tag), f"hour:{tag}", PARTITION_MINUTES_LIVE_S) for tag in layout.all_tags]
        scope = "types" if by_type else "all"
        return [(k.global_history(scope), f"hour:{scope}", ROLLUP_MINUTES_LIVE_S)]

    def _keys(self, scopes: list[Scope], start_s: int, end_s: int, resolution: int, now_s: int, *,
              days: bool = False) -> list[tuple[int, str]]:
        """(unit start in s, key) of every hash in the range: minutes, or hours (and, with days,
        the folded days that lie whole inside the range), and minutes for what is not folded yet
        (an hour no leader folded), only those young enough to exist."""
        wanted: list[tuple[int, str]] = []
        if resolution == MINUTE_S:
            for prefix, _, live_s in scopes:
                wanted += _minutes(prefix, start_s, end_s, oldest_s=now_s - live_s, now_s=now_s)
            return wanted
        folded = text_hash(self.client.hgetall(self.keys.history_folded()))
        for prefix, name, live_s in scopes:
            done = to_int(folded.get(name)) if name in folded else -1
            day_done = to_int(folded.get("day:" + name.partition(":")[2])) if days else -1
            h = start_s // HOUR_S
            while h < end_s // HOUR_S:
                if days and h % 24 == 0 and h // 24 <= day_done and h + 24 <= end_s // HOUR_S:
                    wanted.append((h * HOUR_S, f"{prefix}d:{h // 24}"))
                    h += 24
                    continue
                if h <= done:
                    wanted.append((h * HOUR_S, f"{prefix}h:{h}"))
                else:
                    wanted += _minutes(prefix, h * HOUR_S, (h + 1) * HOUR_S, oldest_s=now_s - live_s,
                                       now_s=now_s)
                h += 1
        return wanted

    def _read(self, scopes: list[Scope], start_s: int, end_s: int, resolution: int, now_s: int, *,
              field: str | None = None, days: bool = False) -> list[tuple[int, dict[str, str]]]:
        """(unit start in s, fields) of every hash in the range (only `field`, when given)."""
        wanted = self._keys(scopes, start_s, end_s, resolution, now_s, days=days)
        pipe = self.client.pipeline(transaction=False)
        for _, key in wanted:
            if field is None:
                pipe.hgetall(key)
            else:
                pipe.hmget(key, [field])
        replies = pipe.execute() if wanted else []
        if field is not None:
            return [(unit, {field: reply[0]}) for (unit, _), reply in zip(wanted, replies, strict=True)
                    if reply and reply[0] is not None]
        return [(unit, text_hash(fields)) for (unit, _), fields in zip(wanted, replies, strict=True) if fields]

    def types(self, range_: str = "30d", *, queue: str | None = None) -> dict[str, Any]:
        """The types table of a range alone (the console's /types/ page): {"types": rows, the
        slowest first, "totals"}; read from whole days where the leader folded them."""
        span, resolution, _ = _check(range_, queue, None, None)
        now_s = self.redis_now_ms() // 1000
        end_s = (now_s // resolution + 1) * resolution
        start_s = end_s - span
        by_type: dict[str, Tally] = {}
        total = Tally.empty()
        for _, fields in self._read(self._scopes(queue, True), start_s, end_s, resolution, now_s, days=True):
            add_by_type(by_type, fields)
            total.merge(tally_fields(fields, None))
        return {"range": range_, "queue": queue, "totals": total.summary(), "types": _types_table(by_type)}

    def _depth(self, queue: str, start_s: int, end_s: int, resolution: int, step: int, count: int,
               now_s: int) -> list[int | None]:
        """The peak of the waiting tasks sampled in each point (None: no sample)."""
        hashes = self._read([(self.keys.global_history("depth"), "hour:depth", ROLLUP_MINUTES_LIVE_S)], start_s,
                            end_s, resolution, now_s, field=queue)
        out: list[int | None] = [None] * count
        for unit_s, fields in hashes:
            index = (unit_s - start_s) // step
            if 0 <= index < count and queue in fields:
                n = to_int(fields[queue])
                out[index] = n if out[index] is None else max(n, out[index] or 0)
        return out


def _minutes(prefix: str, start_s: int, end_s: int, *, oldest_s: int, now_s: int) -> list[tuple[int, str]]:
    """(minute start in s, key) of the minute hashes from start_s to end_s, leaving out those that
    began before oldest_s (long expired) and those after now's (not written yet: a range of days
    ends with the current day, up to 24 h ahead): either would only cost a read each."""
    first = max(start_s, oldest_s) // MINUTE_S
    return [(m * MINUTE_S, f"{prefix}m:{m}") for m in range(first, min(end_s, now_s + MINUTE_S) // MINUTE_S)]


def _check(range_: str, queue: str | None, ttype: str | None, step: int | None) -> tuple[int, int, int]:
    if range_ not in RANGES:
        raise ValidationError(f"range must be one of {', '.join(RANGES)}", field="range")
    if queue is not None and not QUEUE_NAME_RE.fullmatch(queue):
        raise ValidationError("queue is not a queue name", field="queue")
    if ttype is not None and not TASK_TYPE_RE.fullmatch(ttype) and ttype != "(other)":
        raise ValidationError("type is not a task type", field="type")
    span, resolution, default_step = RANGES[range_]
    if step is not None:
        if step <= 0 or step % resolution or span % step:
            raise ValidationError(f"step must be a multiple of {resolution} s that divides the range", field="step")
        if span // step > MAX_POINTS:
            raise ValidationError(f"step gives more than {MAX_POINTS} points", field="step")
    return span, resolution, default_step


def _types_table(by_type: dict[str, Tally]) -> list[dict[str, Any]]:
    """The types table: a row per type, the slowest (by p95 run time) first, at most MAX_TYPES_SHOWN."""
    rows = [{"type": name, **tally.summary()} for name, tally in by_type.items()]
    rows.sort(key=lambda r: (-(r["run_ms"]["p95"] or 0), r["type"]))  # type: ignore[index]
    return rows[:MAX_TYPES_SHOWN]


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)
