"""The per-client buffer and its drop policy, without Redis: bounded, non-terminal first, terminal never."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from dtq_dashboard.fanout import BUFFER_SIZE, TERMINAL_OVERFLOW, ClientBuffer, is_terminal


def event(i: int, status: str = "RUNNING", etype: str = "task.started") -> str:
    return json.dumps({"event_id": f"1-{i}", "type": etype, "task_id": f"t{i}", "queue": "q", "status": status,
                       "attempt": 1, "ts": "2026-01-01T00:00:00.000Z"})


@pytest.mark.parametrize("etype,status,terminal", [
    ("task.succeeded", "SUCCEEDED", True), ("task.failed", "FAILED", True),
    ("task.dead_lettered", "DEAD_LETTERED", True), ("task.cancelled", "CANCELLED", True),
    ("task.expired", "EXPIRED", True), ("task.started", "RUNNING", False), ("task.queued", "QUEUED", False),
    ("task.retrying", "RETRYING", False), ("dlq.retried", "QUEUED", False), ("queue.paused", None, False),
    ("dlq.discarded", "DEAD_LETTERED", False),
])
def test_terminal_events_are_task_events_with_a_terminal_status(etype: str, status: str | None,
                                                                terminal: bool) -> None:
    assert is_terminal({"type": etype, "status": status}) is terminal


def test_the_buffer_holds_1000_then_drops_non_terminal_events() -> None:
    buffer = ClientBuffer()
    assert BUFFER_SIZE == 1000
    dropped = sum(buffer.offer(event(i), terminal=False) for i in range(1500))
    assert len(buffer) == 1000 and dropped == 500 and buffer.dropped == 500
    kept = asyncio.run(buffer.take())
    assert kept[0] == event(0) and kept[-1] == event(999)  # the oldest are kept, the overflow dropped


def test_a_terminal_event_evicts_the_oldest_non_terminal_one_and_is_never_dropped() -> None:
    buffer = ClientBuffer(size=3)
    buffer.offer(event(1), terminal=False)
    buffer.offer(event(2, "SUCCEEDED"), terminal=True)
    buffer.offer(event(3), terminal=False)
    assert buffer.offer(event(4, "FAILED"), terminal=True) == 1
    assert [json.loads(t)["event_id"] for t in asyncio.run(buffer.take())] == ["1-2", "1-3", "1-4"]


def test_a_buffer_full_of_terminal_events_still_takes_more_until_the_overflow_cap() -> None:
    buffer = ClientBuffer(size=2, overflow=4)
    for i in range(4):
        assert buffer.offer(event(i, "SUCCEEDED"), terminal=True) == 0
    assert len(buffer) == 4 and not buffer.overflowed.is_set()
    buffer.offer(event(9, "SUCCEEDED"), terminal=True)
    assert buffer.overflowed.is_set()  # the consumer now closes; the page reconnects and re-reads state
    assert buffer.offer(event(10), terminal=False) == 1
    buffer.offer(event(11, "SUCCEEDED"), terminal=True)
    assert len(buffer) == 5  # nothing more is held for a client that is being closed


def test_events_come_out_in_arrival_order_across_kinds_and_chunks() -> None:
    buffer = ClientBuffer(size=10)
    kinds = [False, True, True, False, True, False, False, True]
    for i, terminal in enumerate(kinds):
        buffer.offer(event(i, "SUCCEEDED" if terminal else "RUNNING"), terminal=terminal)
    taken = []
    while len(buffer):
        taken += asyncio.run(buffer.take(3))
    assert [json.loads(t)["event_id"] for t in taken] == [f"1-{i}" for i in range(len(kinds))]


def test_a_stuck_client_full_of_terminal_events_costs_little_per_event() -> None:
    # A client that stops reading fills its buffer by design; each further event must not cost a
    # walk over everything buffered (the hub dispatches to every client on one event loop).
    buffer = ClientBuffer()
    for i in range(TERMINAL_OVERFLOW // 2):
        buffer.offer(event(i, "SUCCEEDED"), terminal=True)
    started = time.perf_counter()
    for i in range(TERMINAL_OVERFLOW):
        buffer.offer(event(i, "SUCCEEDED") if i % 2 else event(i), terminal=i % 2 == 1)
    assert time.perf_counter() - started < 0.5  # a scan per terminal event took seconds
    assert not buffer.overflowed.is_set() and buffer.dropped == TERMINAL_OVERFLOW // 2


def test_take_waits_for_events() -> None:
    async def scenario() -> list[str]:
        buffer = ClientBuffer()
        waiter = asyncio.create_task(buffer.take())
        await asyncio.sleep(0)
        assert not waiter.done()
        buffer.offer(event(1), terminal=False)
        return await asyncio.wait_for(waiter, 1)

    assert asyncio.run(scenario()) == [event(1)]
