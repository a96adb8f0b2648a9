"""Wall-clock time for anything persisted or sent to Lua; monotonic time for sleeps."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic(self) -> float: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class FakeClock:
    """A clock tests move by hand: `clock.advance(30)`."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._ms = start_ms
        self._mono = 0.0

    def now_ms(self) -> int:
        return self._ms

    def monotonic(self) -> float:
        return self._mono

    def advance(self, seconds: float) -> None:
        self._ms += int(seconds * 1000)
        self._mono += seconds


def iso(ms: int | str | None) -> str | None:
    """Render epoch milliseconds as UTC ISO-8601, the API's time format."""
    if ms in (None, ""):
        return None
    seconds, millis = divmod(int(ms), 1000)
    return f"{_iso_second(seconds)}.{millis:03d}Z"


@functools.lru_cache(maxsize=8)
def _iso_second(seconds: int) -> str:
    # The worker renders now on every fetch and completion: the date part changes once a second.
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
