"""The worker's claim-ahead allowance (dtq_core/worker/turnover.py): attempts ended lately."""

from __future__ import annotations

from dtq_core.worker.turnover import Turnover


def test_ends_count_for_one_window_then_are_forgotten() -> None:
    turnover = Turnover(window_s=0.1)
    assert turnover.lately(100.0) == 0  # nothing ended yet: a fresh worker claims nothing ahead
    turnover.ended(3, 100.0)
    turnover.ended(2, 100.04)
    assert turnover.lately(100.04) == 5
    assert turnover.lately(100.07) == 5  # the half-window rolled: the ends before it still count
    turnover.ended(1, 100.08)
    assert turnover.lately(100.08) == 6
    assert turnover.lately(100.13) == 1  # the first half-window's ends are older than the window now
    assert turnover.lately(100.5) == 0  # a long pause: everything forgotten


def test_a_steady_stream_of_ends_keeps_a_steady_count() -> None:
    turnover = Turnover(window_s=0.1)
    seen = []
    for step in range(1, 400):  # one end a millisecond for 0.4 s
        now = 10.0 + step / 1000
        turnover.ended(1, now)
        seen.append(turnover.lately(now))
    assert min(seen[100:]) >= 50 and max(seen) <= 105  # the last 50-100 ms of ends, at one a millisecond
