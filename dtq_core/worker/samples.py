"""The statistics' samples of a worker's completions, written about once a second.

A completion batch counts, besides its outcomes (written by completeTasks, exact), samples for
the console and /metrics: each task's history fields (outcome, wait and run-time buckets by
type), its queue's finished count of the minute and its run-time bucket. Written by every batch
they were 0.9 of a drain's 9.4 Redis commands per task and 5-9 % of its Redis CPU; so the
worker's batches return them (completeTasks' ARGV[10]) and the worker sums them here, per
partition and minute, and writes them with one flushStats call per partition each FLUSH_EVERY_S
and when it stops, as Sidekiq writes its processed counts with its heartbeat.

What that costs (docs/console.md, "History"; docs/observability.md): those figures show up to
a second late, and a worker killed without its drain (SIGKILL, a lost host) loses up to a second
of them, as does a completion batch whose reply is lost (the batch sent again is "resent" and
carries none); never a task, an outcome count or a record. While Redis cannot be reached they
wait here (at most MAX_MINUTES minutes per partition: older ones would expire before they could
be read).
"""

from __future__ import annotations

import json
import secrets
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

FLUSH_EVERY_S = 1.0
MAX_MINUTES = 25 * 60  # the history's minutes live 25 h (includes/history.lua)
# The leader's roll-up recomputes the minute of its pass and the two before, every 5 s
# (worker/history.py): a write into a minute more than this many minutes before the current one
# may land after the last pass that recomputes it, so it is announced (WorkerStore._mark_late).
LATE_SAMPLE_MINUTES = 1


@dataclass(slots=True)
class PartitionSamples:
    """One partition's samples not written yet."""

    minutes: dict[int, tuple[Counter[str], Counter[str]]] = field(default_factory=dict)  # history, finished
    buckets: Counter[str] = field(default_factory=Counter)
    duration_sum: float = 0.0

    def add(self, minute: int, history: dict[str, int], finished: dict[str, int], buckets: dict[str, int],
            duration_sum: float) -> None:
        if history or finished:
            counts = self.minutes.get(minute)
            if counts is None:
                counts = self.minutes[minute] = (Counter(), Counter())
                if len(self.minutes) > MAX_MINUTES:
                    del self.minutes[min(self.minutes)]
            counts[0].update(history)
            counts[1].update(finished)
        self.buckets.update(buckets)
        self.duration_sum += duration_sum

    def payload(self) -> str:
        """flushStats' ARGV[1]."""
        return json.dumps({"m": [[minute, dict(history), dict(finished)]
                                 for minute, (history, finished) in sorted(self.minutes.items())],
                           "b": dict(self.buckets), "s": round(self.duration_sum, 6)},
                          separators=(",", ":"))


class Samples:
    """The samples of every partition this worker completed tasks of, not written yet.

    Each write of a partition's samples is numbered (flushStats keeps the last number applied, per
    writer): a write whose outcome is unknown (an error, a lost reply) is sent again unchanged
    until it is answered, and the partition's newer samples wait behind it, so none is added
    twice and at most one write per partition is ever unanswered.
    """

    def __init__(self, worker_id: str) -> None:
        self.writer = f"{worker_id}:{secrets.token_hex(4)}"  # a restart under the same id starts afresh
        self._pending: dict[str, PartitionSamples] = {}
        self._unanswered: dict[str, tuple[int, str, list[int]]] = {}  # tag -> (number, payload, its minutes)
        self._number = 0

    def __bool__(self) -> bool:
        return bool(self._pending or self._unanswered)

    def add(self, tag: str, minute: int, reply: Any) -> None:
        """Add one completeTasks reply's samples (its last element, JSON) for its partition."""
        raw = reply.decode() if isinstance(reply, bytes) else str(reply)
        s = json.loads(raw)
        history, finished, buckets = _counts(s.get("h")), _counts(s.get("f")), _counts(s.get("b"))
        duration_sum = float(s.get("s") or 0)
        if not (history or finished or buckets):
            return  # a batch of fenced or resent records
        self._pending.setdefault(tag, PartitionSamples()).add(minute, history, finished, buckets, duration_sum)

    def writes(self) -> list[tuple[str, int, str]]:
        """The writes to send now, (tag, number, flushStats payload): every unanswered one, and a
        new one for each other partition with samples."""
        for tag in [tag for tag in self._pending if tag not in self._unanswered]:
            self._number += 1
            pending = self._pending.pop(tag)
            self._unanswered[tag] = (self._number, pending.payload(), sorted(pending.minutes))
        return [(tag, number, payload) for tag, (number, payload, _) in self._unanswered.items()]

    def answered(self, tag: str, number: int) -> list[int]:
        """flushStats answered this write (applied, applied before, or the partition is gone);
        return the minutes it held history for."""
        number_, _payload, minutes = self._unanswered.get(tag, (0, "", []))
        if number_ != number:
            return []
        del self._unanswered[tag]
        return minutes


def _counts(value: Any) -> dict[str, int]:
    # An empty Lua table encodes as {} (cjson cannot tell it from an array): either is "none".
    return {str(k): int(v) for k, v in value.items()} if isinstance(value, dict) else {}
