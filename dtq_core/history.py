"""Task history: what the history hashes hold and how a series is made from them (issue 24).

The scripts that end an attempt count, per partition and epoch minute, by task type
(includes/history.lua): outcomes ("<type>|s", succeeded; f failed; r retried; d dead-lettered;
c cancelled; e expired) and two histograms of log-spaced buckets, wait ("<type>|w<b>": the entry's
add to the claim) and run time ("<type>|r<b>"). The leader sums every partition's minutes into
global roll-ups (scope "all": metrics alone; "types": "<type>|<metric>"), samples queue depths
(scope "depth"), and folds minutes into hours (dtq_core/worker/history.py). Percentiles come from
the merged buckets, so they are estimates within a bucket's width (about 41 %, interpolated).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

MINUTE_S = 60
HOUR_S = 3600
MINUTE_TTL_MS = 25 * HOUR_S * 1000  # includes/history.lua HISTORY_MINUTE_TTL_MS
HOUR_TTL_MS = 31 * 24 * HOUR_S * 1000  # 30 days of hours, and a day's slack
OTHER = "(other)"  # includes/history.lua HISTORY_OTHER: the types past the cap of a partition
MAX_GLOBAL_TYPES = 200  # the "types" roll-up's own cap (the same "(other)" past it)
MAX_BUCKET = 60

OUTCOMES: dict[str, str] = {"s": "succeeded", "f": "failed", "r": "retried", "d": "dead_lettered",
                            "c": "cancelled", "e": "expired"}
FAILURES = ("f", "d", "e")  # what an error rate counts (a retry is not a failure yet)
PERCENTILES = (50, 95, 99)

# Ranges the console and GET /api/v1/stats offer: (span in s, source resolution in s, default step).
RANGES: dict[str, tuple[int, int, int]] = {
    "1h": (HOUR_S, MINUTE_S, MINUTE_S),
    "24h": (24 * HOUR_S, MINUTE_S, 5 * MINUTE_S),
    "7d": (7 * 24 * HOUR_S, HOUR_S, HOUR_S),
    "30d": (30 * 24 * HOUR_S, HOUR_S, 24 * HOUR_S),
}
DAY_S = 24 * HOUR_S
MAX_POINTS = 1440  # a step that would give more points is refused


def bucket_of(ms: float) -> int:
    """includes/history.lua history_bucket: bucket b >= 1 holds [2^((b-1)/2), 2^(b/2)) ms."""
    if ms < 1:
        return 0
    return min(MAX_BUCKET, math.floor(math.log(ms) * (2 / math.log(2))) + 1)


def bucket_bounds(b: int) -> tuple[float, float]:
    if b <= 0:
        return 0.0, 1.0
    return 2 ** ((b - 1) / 2), 2 ** (b / 2)


def percentile(buckets: Mapping[int, int], q: float) -> float | None:
    """The q-th percentile (0-100) in ms of a bucket histogram, interpolated within its bucket on a
    log scale (linear in the first); None without samples."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = q / 100 * total
    seen = 0
    for b in sorted(buckets):
        n = buckets[b]
        if n <= 0:
            continue
        if seen + n >= rank:
            lo, hi = bucket_bounds(b)
            f = min(1.0, max(0.0, (rank - seen) / n))
            return lo + (hi - lo) * f if b == 0 else lo * (hi / lo) ** f
        seen += n
    return bucket_bounds(max(buckets))[1]


@dataclass(slots=True)
class Tally:
    """Counts of one slice of history: outcomes by letter, and the two histograms."""

    outcomes: dict[str, int]
    wait: dict[int, int]
    run: dict[int, int]

    @classmethod
    def empty(cls) -> Tally:
        return cls({}, {}, {})

    def add_metric(self, metric: str, n: int) -> None:
        if metric in OUTCOMES:
            self.outcomes[metric] = self.outcomes.get(metric, 0) + n
        elif metric[:1] in ("w", "r") and metric[1:].isdigit():
            target = self.wait if metric[0] == "w" else self.run
            b = int(metric[1:])
            target[b] = target.get(b, 0) + n

    def merge(self, other: Tally) -> None:
        for letter, n in other.outcomes.items():
            self.outcomes[letter] = self.outcomes.get(letter, 0) + n
        for mine, theirs in ((self.wait, other.wait), (self.run, other.run)):
            for b, n in theirs.items():
                mine[b] = mine.get(b, 0) + n

    @property
    def finished(self) -> int:
        return sum(n for letter, n in self.outcomes.items() if letter != "r")

    def error_rate(self) -> float | None:
        done = self.finished
        return None if done == 0 else round(sum(self.outcomes.get(f, 0) for f in FAILURES) / done, 4)

    def summary(self) -> dict[str, object]:
        out: dict[str, object] = {name: self.outcomes.get(letter, 0) for letter, name in OUTCOMES.items()}
        out["error_rate"] = self.error_rate()
        out["wait_ms"] = {f"p{q}": _ms(percentile(self.wait, q)) for q in PERCENTILES}
        out["run_ms"] = {f"p{q}": _ms(percentile(self.run, q)) for q in PERCENTILES}
        return out


def _ms(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def to_int(raw: object) -> int:
    if isinstance(raw, int):
        return raw
    try:
        return int(str(raw))
    except ValueError:
        return 0


def split_field(name: str) -> tuple[str, str]:
    """("<type>", "<metric>") of a "<type>|<metric>" field; ("", name) of a bare metric."""
    ttype, sep, metric = name.rpartition("|")
    return (ttype, metric) if sep else ("", name)


def tally_fields(fields: Mapping[str, object], ttype: str | None = None) -> Tally:
    """Sum a history hash's fields (of one type when given) into a Tally."""
    tally = Tally.empty()
    for name, raw in fields.items():
        field_type, metric = split_field(name)
        if ttype is not None and field_type != ttype:
            continue
        tally.add_metric(metric, to_int(raw))
    return tally


def add_by_type(by_type: dict[str, Tally], fields: Mapping[str, object]) -> None:
    """Add a history hash's fields to the tallies of their task types."""
    for name, raw in fields.items():
        ttype, metric = split_field(name)
        if ttype:
            by_type.setdefault(ttype, Tally.empty()).add_metric(metric, to_int(raw))
