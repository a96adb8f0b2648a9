"""How fast a worker's slots free: how many rows a fetch may claim ahead of its free slots.

Claiming ahead (the backlog) lets a freed slot start its next attempt at once instead of after a
fetch's round trip, and makes fetches bigger: for short tasks it is most of a worker's drain rate.
For long tasks it only hoards: rows claimed behind busy slots wait there while idle peers could
run them. So a worker claims ahead only as many rows as its attempts ended lately (within
WINDOW_S, at most --concurrency): a worker draining short tasks keeps a full backlog, one busy
with long ones claims nothing it cannot start.
"""

from __future__ import annotations

WINDOW_S = 0.1  # "lately": ends counted over the last 50-100 ms (two half-windows)


class Turnover:
    """Attempts ended in the current half-window and the one before it."""

    __slots__ = ("_half_s", "_since", "_current", "_previous")

    def __init__(self, window_s: float = WINDOW_S) -> None:
        self._half_s = window_s / 2
        self._since = 0.0
        self._current = 0
        self._previous = 0

    def ended(self, count: int, now: float) -> None:
        self._roll(now)
        self._current += count

    def lately(self, now: float) -> int:
        self._roll(now)
        return self._current + self._previous

    def _roll(self, now: float) -> None:
        elapsed = now - self._since
        if elapsed >= self._half_s:
            self._previous = self._current if elapsed < 2 * self._half_s else 0
            self._current = 0
            self._since = now
