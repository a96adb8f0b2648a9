"""The freeze/gap rule (dtq_core/worker/liveness.py) on its own, without Redis: a reaper reclaims
only while its own heartbeats are on time, and only a visibility timeout after they resumed from
a gap (docs/failure-modes.md, "Redis frozen")."""

from __future__ import annotations

import logging

import pytest

from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.worker.liveness import Liveness

CONFIG = DtqConfig(visibility_timeout_s=30, heartbeat_interval_s=5)


def beating(clock: FakeClock) -> Liveness:
    liveness = Liveness(CONFIG, clock, "w1")
    liveness.beat_done()
    return liveness


def test_a_worker_that_never_beat_reclaims_nothing() -> None:
    assert not Liveness(CONFIG, FakeClock(), "w1").may_reclaim()


def test_beats_on_time_allow_reclaiming() -> None:
    clock = FakeClock()
    liveness = beating(clock)
    for _ in range(20):
        clock.advance(CONFIG.heartbeat_every_s)
        liveness.beat_done()
        assert liveness.may_reclaim()


def test_a_late_beat_within_the_gap_threshold_is_not_a_gap() -> None:
    clock = FakeClock()
    liveness = beating(clock)
    clock.advance(CONFIG.beat_gap_s)
    assert liveness.may_reclaim()
    liveness.beat_done()
    assert liveness.may_reclaim()


def test_no_reclaim_while_beats_are_overdue() -> None:
    clock = FakeClock()
    liveness = beating(clock)
    clock.advance(CONFIG.beat_gap_s + 0.1)
    assert not liveness.may_reclaim()


def test_after_a_gap_nothing_is_reclaimed_for_a_visibility_timeout(caplog: pytest.LogCaptureFixture) -> None:
    clock = FakeClock()
    liveness = beating(clock)
    clock.advance(CONFIG.visibility_timeout_s)  # Redis frozen: no beat lands
    with caplog.at_level(logging.WARNING, logger="dtq.worker"):
        liveness.beat_done()
    assert "heartbeats resumed after 30.0s without one" in caplog.text
    while clock.monotonic() < CONFIG.visibility_timeout_s * 2 - 0.01:
        assert not liveness.may_reclaim()  # live owners are still refreshing their entries
        clock.advance(CONFIG.heartbeat_every_s / 2)
        liveness.beat_done()
    clock.advance(0.01)
    liveness.beat_done()
    assert liveness.may_reclaim()


def test_a_reclaim_round_that_stalled_as_long_as_a_gap_is_not_trusted() -> None:
    clock = FakeClock()
    liveness = beating(clock)
    assert liveness.trusted(CONFIG.beat_gap_s)
    assert not liveness.trusted(CONFIG.beat_gap_s + 0.1)
