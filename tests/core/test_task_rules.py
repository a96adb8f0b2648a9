"""Pure rules: the state machine, backoff with full jitter, names."""

from __future__ import annotations

import random

import pytest

from dtq_core.task import (
    TERMINAL,
    TRANSITIONS,
    RetryPolicy,
    Status,
    can_transition,
    next_attempt_at,
    retry_delay_s,
    valid_queue_name,
)


def test_terminal_states_have_no_way_out_except_a_dlq_retry() -> None:
    for status in TERMINAL:
        allowed = TRANSITIONS[status]
        assert allowed == (frozenset({Status.QUEUED}) if status is Status.DEAD_LETTERED else frozenset())


@pytest.mark.parametrize(
    ("current", "target", "ok"),
    [
        (Status.PENDING, Status.QUEUED, True), (Status.QUEUED, Status.RUNNING, True),
        (Status.RUNNING, Status.RETRYING, True), (Status.RETRYING, Status.QUEUED, True),
        (Status.QUEUED, Status.SUCCEEDED, False), (Status.SUCCEEDED, Status.RUNNING, False),
        (Status.CANCELLED, Status.QUEUED, False), (Status.PENDING, Status.RUNNING, False),
    ],
)
def test_transitions(current: Status, target: Status, ok: bool) -> None:
    assert can_transition(current, target) is ok


@pytest.mark.parametrize(("attempt", "ceiling"), [(1, 1), (2, 2), (3, 4), (6, 32), (10, 300), (50, 300)])
def test_backoff_is_full_jitter_under_an_exponential_ceiling(attempt: int, ceiling: float) -> None:
    policy = RetryPolicy(base_s=1, max_s=300)
    rng = random.Random(7)
    delays = [retry_delay_s(attempt, policy, rng) for _ in range(300)]
    assert all(0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling * 0.8  # full jitter spreads across the whole window


def test_next_attempt_at_stops_at_the_budget() -> None:
    policy = RetryPolicy(base_s=1, max_s=5)
    assert next_attempt_at(attempt=3, max_attempts=3, now_ms=0, policy=policy) is None
    due = next_attempt_at(attempt=1, max_attempts=3, now_ms=1000, policy=policy)
    assert due is not None and 1000 <= due <= 2000


@pytest.mark.parametrize(
    ("name", "ok"),
    [("default", True), ("a", True), ("emails-2_x", True), ("x" * 64, True), ("x" * 65, False),
     ("Default", False), ("-x", False), ("", False), ("dlq", False), ("audit", False), ("a b", False),
     ("a:b", False), (None, False)],
)
def test_queue_names(name: object, ok: bool) -> None:
    assert valid_queue_name(name) is ok
