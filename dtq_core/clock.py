"""Wall-clock time for anything persisted or sent to Lua; monotonic time for sleeps."""

from __future__ import annotations

import functools
import time
from datetime import UTC, datetime
from typing import Any, Protocol


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic(self) -> float: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.monotonic()


class RedisAlignedClock:
    """The system clock moved onto Redis's: what a worker writes and compares with other hosts'
    times (retry and delay due times, heartbeats, claim and lock ages, ttl_seconds) then agrees
    with its peers' even when its host's clock is off, as long as theirs follow Redis's too."""

    # Offsets measured within this of the one in use are round-trip noise: keep time steady.
    NOISE_MS = 100

    def __init__(self) -> None:
        self.offset_ms = 0  # Redis's clock minus ours

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def monotonic(self) -> float:
        return time.monotonic()

    @staticmethod
    def system_ms() -> int:
        return time.time_ns() // 1_000_000

    def align(self, sent_ms: int, redis_ms: int, received_ms: int) -> bool:
        """Take Redis's TIME read between sent_ms and received_ms (our clock); True when the offset
        moved (by more than round-trip noise). A reading across a step of our own clock (a
        negative round trip, or one over a second) says nothing reliable and is dropped."""
        if not 0 <= received_ms - sent_ms <= 1000:
            return False
        offset = redis_ms - (sent_ms + received_ms) // 2
        if abs(offset - self.offset_ms) <= max(self.NOISE_MS, received_ms - sent_ms):
            return False
        self.offset_ms = offset
        return True


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


def redis_time_ms(reply: Any) -> int:
    """Redis's TIME reply (seconds, microseconds) in milliseconds."""
    seconds, micros = reply
    return int(seconds) * 1000 + int(micros) // 1000


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
