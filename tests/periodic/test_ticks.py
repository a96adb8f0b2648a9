"""The tick computation (dtq_core/ticks.py, dtq_core/firing.py) on a fixed clock: cron in a time
zone across daylight-saving changes, intervals, and what a late leader fires (misfire)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dtq_core.firing import plan
from dtq_core.ticks import BadSchedule, Ticks


def ms(stamp: str) -> int:
    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


def utc(tick: int) -> str:
    return datetime.fromtimestamp(tick / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S")


def ticks_of(t: Ticks, start: str, end: str) -> list[str]:
    return [utc(x) for x in t.between(ms(start), ms(end), 100)]


def test_a_daily_job_in_berlin_fires_at_local_time_either_side_of_dst() -> None:
    t = Ticks(cron="0 3 * * *", timezone="Europe/Berlin")
    assert ticks_of(t, "2026-03-27T00:00:00+00:00", "2026-03-30T12:00:00+00:00") == [
        "2026-03-27 02:00:00", "2026-03-28 02:00:00",  # CET: UTC+1
        "2026-03-29 01:00:00", "2026-03-30 01:00:00",  # CEST from 29 March: UTC+2
    ]


def test_a_time_in_the_skipped_hour_fires_once_at_the_end_of_the_gap() -> None:
    # 29 March 2026, Berlin: 02:00 CET jumps to 03:00 CEST; 02:30 does not exist that night.
    t = Ticks(cron="30 2 * * *", timezone="Europe/Berlin")
    assert ticks_of(t, "2026-03-28T00:00:00+00:00", "2026-03-30T12:00:00+00:00") == [
        "2026-03-28 01:30:00",  # 02:30 CET
        "2026-03-29 01:00:00",  # the first valid instant after 02:30: 03:00 CEST
        "2026-03-30 00:30:00",  # 02:30 CEST
    ]


def test_times_in_the_gap_and_its_end_fire_once_together() -> None:
    t = Ticks(cron="*/30 2-3 * * *", timezone="Europe/Berlin")
    assert ticks_of(t, "2026-03-29T00:00:00+00:00", "2026-03-29T03:00:00+00:00") == [
        "2026-03-29 01:00:00",  # 02:00, 02:30 (skipped) and 03:00: one instant, one tick
        "2026-03-29 01:30:00",  # 03:30 CEST
    ]


def test_a_time_in_the_repeated_hour_fires_once_at_its_first_occurrence() -> None:
    # 25 October 2026, Berlin: 03:00 CEST goes back to 02:00 CET; 02:30 happens twice.
    t = Ticks(cron="30 2 * * *", timezone="Europe/Berlin")
    assert ticks_of(t, "2026-10-24T00:00:00+00:00", "2026-10-26T12:00:00+00:00") == [
        "2026-10-24 00:30:00",  # 02:30 CEST
        "2026-10-25 00:30:00",  # the first 02:30 (CEST), not the second (01:30 UTC)
        "2026-10-26 01:30:00",  # 02:30 CET
    ]


def test_next_after_a_tick_in_the_second_pass_of_the_repeated_hour() -> None:
    # The clock reads 02:40 for the second time (CET): the 02:30s of both passes are behind.
    t = Ticks(cron="30 2 * * *", timezone="Europe/Berlin")
    assert utc(t.next_after(ms("2026-10-25T01:40:00+00:00"))) == "2026-10-26 01:30:00"


def test_a_new_york_job_and_a_southern_hemisphere_one() -> None:
    ny = Ticks(cron="30 2 * * *", timezone="America/New_York")  # 8 March 2026: 02:00 -> 03:00
    assert ticks_of(ny, "2026-03-08T00:00:00+00:00", "2026-03-08T12:00:00+00:00") == ["2026-03-08 07:00:00"]
    syd = Ticks(cron="30 2 * * *", timezone="Australia/Sydney")  # 4 October 2026: 02:00 -> 03:00
    assert ticks_of(syd, "2026-10-03T12:00:00+00:00", "2026-10-04T12:00:00+00:00") == ["2026-10-03 16:00:00"]


def test_six_fields_have_seconds_first() -> None:
    t = Ticks(cron="15 0 * * * *")
    assert ticks_of(t, "2026-01-01T00:00:00+00:00", "2026-01-01T02:00:00+00:00") == [
        "2026-01-01 00:00:15", "2026-01-01 01:00:15"]


def test_every_seconds_counts_from_the_epoch() -> None:
    t = Ticks(every_seconds=3600)
    assert utc(t.next_after(ms("2026-01-01T10:20:00+00:00"))) == "2026-01-01 11:00:00"
    assert t.next_after(ms("2026-01-01T11:00:00+00:00")) == ms("2026-01-01T12:00:00+00:00")  # strictly after
    assert Ticks(every_seconds=1.5).between(0, 4500, 10) == [0, 1500, 3000, 4500]


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"cron": "0 3 * *"}, "cron"), ({"cron": "0 25 * * *"}, "cron"), ({}, "cron"),
    ({"cron": "0 3 * * *", "every_seconds": 1}, "cron"), ({"every_seconds": 0.1}, "every_seconds"),
    ({"every_seconds": float("inf")}, "every_seconds"), ({"cron": "0 3 * * *", "timezone": "CEST+2"}, "timezone"),
    # A file under the zoneinfo directory that is not a zone of the same meaning on every host.
    ({"cron": "0 3 * * *", "timezone": "localtime"}, "timezone"),
    ({"cron": "0 3 * * *", "timezone": "posixrules"}, "timezone"),
    ({"cron": "0 3 * * *", "timezone": "../zoneinfo/UTC"}, "timezone"),
    ({"every_seconds": 1.0000001}, "every_seconds"), ({"every_seconds": 2.0005}, "every_seconds"),
])
def test_bad_schedules_name_their_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(BadSchedule) as caught:
        Ticks(**kwargs)  # type: ignore[arg-type]
    assert caught.value.field == field


def test_every_seconds_to_the_millisecond_is_kept() -> None:
    assert Ticks(every_seconds=1.001).interval_ms == 1001
    assert Ticks(every_seconds=2.1).interval_ms == 2100  # 2.1 * 1000 is 2100.0000000000005 in floats


def test_a_reversed_range_wraps_around_as_described() -> None:
    t = Ticks(cron="0 23-1 * * *")
    assert t.describe() == "At 0 minutes past the hour, between 23:00 and 01:59"
    assert t.between(ms("2026-01-01T20:00:00+00:00"), ms("2026-01-02T20:00:00+00:00"), 10) == [
        ms("2026-01-01T23:00:00+00:00"), ms("2026-01-02T00:00:00+00:00"), ms("2026-01-02T01:00:00+00:00")]


def test_a_cron_that_never_matches_is_refused() -> None:
    with pytest.raises(BadSchedule) as caught:
        Ticks(cron="0 0 30 2 *")
    assert caught.value.field == "cron"


def test_descriptions() -> None:
    assert Ticks(cron="0 3 * * *", timezone="Europe/Berlin").describe() == "At 03:00 (Europe/Berlin)"
    assert Ticks(cron="*/5 * * * *").describe() == "Every 5 minutes"
    assert Ticks(every_seconds=1).describe() == "Every second"
    assert Ticks(every_seconds=90).describe() == "Every 90 seconds"


# -- what a leader fires, on a fixed clock ------------------------------------------------------
EVERY_S = Ticks(every_seconds=1)
GRACE = 3000


def test_an_on_time_tick_fires_and_the_next_is_after_now() -> None:
    p = plan(EVERY_S, 10_000, 10_200, GRACE, "skip")
    assert p is not None and p.on_time == (10_000,) and p.missed_first is None and p.new_next == 11_000
    assert plan(EVERY_S, 11_000, 10_200, GRACE, "skip") is None  # not due


def test_a_handover_within_the_grace_fires_each_late_tick() -> None:
    p = plan(EVERY_S, 10_000, 12_500, GRACE, "skip")
    assert p is not None and p.on_time == (10_000, 11_000, 12_000) and p.missed_count == 0


@pytest.mark.parametrize("misfire", ["skip", "run_once"])
def test_ticks_older_than_the_grace_are_missed(misfire: str) -> None:
    p = plan(EVERY_S, 10_000, 60_000, GRACE, misfire)
    assert p is not None
    assert p.missed_first == 10_000 and p.missed_count == 47  # 10 s .. 56 s
    assert p.on_time == tuple(range(57_000, 60_001, 1000)) and p.new_next == 61_000


def test_a_daily_job_missed_by_an_hour() -> None:
    daily = Ticks(cron="0 3 * * *")
    p = plan(daily, ms("2026-05-01T03:00:00+00:00"), ms("2026-05-01T04:00:00+00:00"), GRACE, "run_once")
    assert p is not None and p.on_time == () and p.missed_count == 1
    assert p.new_next == ms("2026-05-02T03:00:00+00:00")


def test_one_walk_gives_the_ticks_next_after_gives_one_by_one() -> None:
    t = Ticks(cron="*/20 * * * *", timezone="Europe/Berlin")
    start, end = ms("2026-10-24T22:00:00+00:00"), ms("2026-10-25T04:00:00+00:00")
    walked = t.between(start, end, 100)
    stepped, tick = [], t.next_after(start - 1)
    while tick <= end:
        stepped.append(tick)
        tick = t.next_after(tick)
    assert walked == stepped and len(walked) == len(set(walked))
    # The repeated hour (01:00-02:00 UTC) has no tick: its local times fired in the first pass.
    assert [utc(x) for x in walked if ms("2026-10-25T00:30:00+00:00") <= x <= ms("2026-10-25T02:00:00+00:00")] == [
        "2026-10-25 00:40:00", "2026-10-25 02:00:00"]
