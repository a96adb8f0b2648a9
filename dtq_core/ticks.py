"""When a periodic schedule fires: its ticks, as epoch milliseconds (docs/tasks.md#periodic-tasks).

Two kinds of schedule:

- `every_seconds`: ticks at the multiples of the interval since the Unix epoch (every_seconds=3600
  fires at the top of each UTC hour), so every process computes the same ticks, whatever the
  time zone and whenever the schedule was made.
- `cron` (5 fields, or 6 with seconds first; evaluated by croniter) in an IANA time zone. The
  expression is matched against local wall-clock times, each of which fires once:
  a local time that does not exist (the hour skipped when clocks go forward) fires at the first
  valid instant after it (the end of the gap: 02:30 fires at 03:00 that night), and a local time
  that happens twice (the hour repeated when clocks go back) fires at its first occurrence only.
  Two local times that fall on the same instant (02:30 and 03:00 on a spring-forward night) fire
  once.

Pure logic: the clock is the caller's (the leader's, or a test's fixed one).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cron_descriptor import Options, get_description
from croniter import CroniterBadDateError, croniter

MIN_EVERY_S = 1.0  # the leader fires from its tick (DTQ_SCHEDULER_INTERVAL_S): sub-second is noise
MAX_EVERY_S = 366 * 86400.0
# A cron expression that never matches (Feb 30) must not keep the leader iterating.
MAX_CRON_STEPS = 10_000


class BadSchedule(ValueError):
    """A schedule that cannot be evaluated: its message names what is wrong; field, which field."""

    def __init__(self, message: str, field: str) -> None:
        super().__init__(message)
        self.field = field


@cache
def _iana_names() -> frozenset[str]:
    # available_timezones() lists every TZif file it finds, Debian's `localtime` link among them.
    return frozenset(available_timezones()) - {"localtime"}


def zone(name: str) -> ZoneInfo:
    # ZoneInfo also opens any file under the zoneinfo directory, and Debian's `localtime` there is
    # a link to the host's /etc/localtime: a schedule in it would fire at a different instant on
    # each host. Only IANA names read the same everywhere.
    if not isinstance(name, str) or name not in _iana_names():
        raise BadSchedule(f"timezone {name!r} is not an IANA time zone name (e.g. 'Europe/Berlin')",
                          "timezone")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise BadSchedule(f"timezone {name!r} is not an IANA time zone name (e.g. 'Europe/Berlin')",
                          "timezone") from None


@dataclass(frozen=True, slots=True)
class Ticks:
    """The ticks of one schedule: exactly one of cron / every_seconds."""

    cron: str | None = None
    timezone: str = "UTC"
    every_seconds: float | None = None

    def __post_init__(self) -> None:
        if (self.cron is None) == (self.every_seconds is None):
            raise BadSchedule("give exactly one of cron and every_seconds", "cron")
        if self.every_seconds is not None:
            value = self.every_seconds
            # No math.isfinite on an int: it overflows past float's range; NaN fails the range.
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not MIN_EVERY_S <= value <= MAX_EVERY_S:
                raise BadSchedule(f"every_seconds must be a number between {MIN_EVERY_S:g} and {MAX_EVERY_S:g}",
                                  "every_seconds")
            # Ticks are whole milliseconds: 1.0000001 would be shown as given and fire every 1 s.
            if abs(value * 1000 - round(value * 1000)) > 1e-6:
                raise BadSchedule("every_seconds is kept to the millisecond: give at most 3 decimals",
                                  "every_seconds")
        else:
            fields = self.cron.split() if isinstance(self.cron, str) else []
            if len(fields) not in (5, 6) or not croniter.is_valid(" ".join(fields), second_at_beginning=True):
                raise BadSchedule("cron must be a cron expression of 5 fields, or 6 with seconds first "
                                  "(e.g. '0 3 * * *')", "cron")
        zone(self.timezone)
        if self.cron is not None:
            self._next_cron(0)  # one that never matches (0 0 30 2 *) is refused now, not by the leader

    @property
    def interval_ms(self) -> int | None:
        return None if self.every_seconds is None else max(1, round(self.every_seconds * 1000))

    def next_after(self, after_ms: int) -> int:
        """The first tick strictly after after_ms."""
        step = self.interval_ms
        if step is not None:
            return (after_ms // step + 1) * step
        return self._next_cron(after_ms)

    def between(self, first_ms: int, last_ms: int, limit: int) -> list[int]:
        """The ticks t with first_ms <= t <= last_ms, at most `limit` of them (the earliest)."""
        out: list[int] = []
        for tick in self._after(first_ms - 1):
            if tick > last_ms or len(out) >= limit:
                break
            out.append(tick)
        return out

    def _after(self, after_ms: int) -> Iterator[int]:
        """The ticks after after_ms, in order (one cron iterator for all of them)."""
        step = self.interval_ms
        if step is not None:
            tick = (after_ms // step + 1) * step
            while True:
                yield tick
                tick += step
        yield from self._cron_after(after_ms)

    def _next_cron(self, after_ms: int) -> int:
        for tick in self._cron_after(after_ms):
            return tick
        raise BadSchedule(f"cron {self.cron!r} has no tick after {after_ms} ms", "cron")

    def _cron_after(self, after_ms: int) -> Iterator[int]:
        tz = zone(self.timezone)
        after = datetime.fromtimestamp(after_ms / 1000, UTC)
        # Local wall-clock times, iterated without a zone (so croniter sees no DST), from the
        # local time of after_ms: a candidate before it maps to an instant before after_ms.
        start = after.astimezone(tz).replace(tzinfo=None, fold=0, microsecond=0)
        it = croniter(self.cron, start, second_at_beginning=True)
        last, idle = after_ms, 0
        while idle < MAX_CRON_STEPS:  # steps that give no new tick (a repeated hour's second pass)
            try:
                local = it.get_next(datetime)
            except CroniterBadDateError:
                return
            ms = int(_instant(local, tz).timestamp() * 1000)
            if ms > last:
                last, idle = ms, 0
                yield ms
            else:
                idle += 1

    def describe(self) -> str:
        if self.every_seconds is not None:
            seconds = self.every_seconds
            return "Every second" if seconds == 1 else f"Every {seconds:g} seconds"
        options = Options()
        options.use_24hour_time_format = True
        text = get_description(self.cron, options)
        return text if self.timezone == "UTC" else f"{text} ({self.timezone})"


def _instant(local: datetime, tz: ZoneInfo) -> datetime:
    """The UTC instant of a local wall-clock time under the rule above: the first occurrence of
    a repeated time, the end of the gap for a time that does not exist."""
    aware = local.replace(tzinfo=tz, fold=0)
    instant = aware.astimezone(UTC)
    if instant.astimezone(tz).replace(tzinfo=None) == local:
        return instant
    # In a gap: fold=1 reads the time with the offset after the change, fold=0 with the one
    # before; the change happened between the two readings. Find its second (changes fall on
    # whole seconds): the first whose offset is the later one.
    low, high = sorted((int(local.replace(tzinfo=tz, fold=1).timestamp()), int(aware.timestamp())))
    before = datetime.fromtimestamp(low, tz).utcoffset()
    while high - low > 1:
        mid = (low + high) // 2
        if datetime.fromtimestamp(mid, tz).utcoffset() == before:
            low = mid
        else:
            high = mid
    return datetime.fromtimestamp(high, UTC)

__all__ = ["BadSchedule", "Ticks", "zone"]
