"""RedisAlignedClock: a worker's wall clock moved onto Redis's TIME."""

from __future__ import annotations

import pytest

from dtq_core.clock import RedisAlignedClock


def test_it_takes_the_offset_from_a_reading_in_the_middle_of_the_round_trip() -> None:
    clock = RedisAlignedClock()
    assert clock.align(sent_ms=1_000_000, redis_ms=1_030_010, received_ms=1_000_020)
    assert clock.offset_ms == 30_000


def test_round_trip_noise_does_not_move_the_offset() -> None:
    clock = RedisAlignedClock()
    clock.align(sent_ms=1_000_000, redis_ms=1_030_010, received_ms=1_000_020)
    assert not clock.align(sent_ms=2_000_000, redis_ms=2_030_050, received_ms=2_000_020)
    assert clock.offset_ms == 30_000


@pytest.mark.parametrize("received_ms", [999_000, 1_005_000], ids=["clock-stepped-back", "round-trip-over-1s"])
def test_a_reading_across_a_step_of_our_own_clock_is_dropped(received_ms: int) -> None:
    # It should keep the offset it had: half a clock step would otherwise become the offset.
    clock = RedisAlignedClock()
    clock.align(sent_ms=500_000, redis_ms=530_010, received_ms=500_020)
    assert not clock.align(sent_ms=1_000_000, redis_ms=1_030_000, received_ms=received_ms)
    assert clock.offset_ms == 30_000
