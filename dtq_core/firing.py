"""What one call of firePeriodic-1 fires: the plan the leader computes from a schedule's stored
next tick and its clock, and the script's arguments (shared by the leader and engine.periodic's
trigger and resume).

Catching up (docs/tasks.md#periodic-tasks): the ticks due are those from the stored next tick to
now. One no older than the grace (worker/periodic.py grace_ms: the lease TTL plus a few leader
rounds, how late a leader handover can make a tick) is on time and fires, each with a task of its own. Older ones were
missed (no leader could fire them): misfire=skip fires none of them and records how many;
misfire=run_once fires one task for all of them (scheduled_for: the first missed tick).

Pure logic: no Redis, the clock is the caller's.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from .clock import iso
from .ticks import Ticks

MAX_ON_TIME = 100  # ticks one call fires at most (every_seconds >= 1 and a grace of seconds: a few)
MAX_COUNTED = 1000  # missed ticks of a cron counted at most (croniter walks them: ~0.2 ms each)
RUNS_KEPT = 20


@dataclass(frozen=True, slots=True)
class FirePlan:
    expected_next: int  # the stored next tick the plan was computed from
    on_time: tuple[int, ...]
    missed_first: int | None  # the first missed tick
    missed_count: int
    new_next: int


def plan(ticks: Ticks, next_ms: int, now_ms: int, grace_ms: int, misfire: str) -> FirePlan | None:
    """The fire for a schedule whose stored next tick is next_ms; None when it is not due."""
    if next_ms > now_ms:
        return None
    cutoff = now_ms - grace_ms
    missed_first, missed_count = None, 0
    if next_ms < cutoff:
        missed_first = next_ms
        missed_count = _count(ticks, next_ms, cutoff - 1)
    on_time = tuple(ticks.between(max(next_ms, cutoff), now_ms, MAX_ON_TIME))
    new_next = ticks.next_after(on_time[-1] if len(on_time) == MAX_ON_TIME else now_ms)
    return FirePlan(expected_next=next_ms, on_time=on_time, missed_first=missed_first,
                    missed_count=missed_count if misfire in ("skip", "run_once") else 0, new_next=new_next)


def count(ticks: Ticks, first: int, last: int) -> int:
    """How many ticks fall in [first, last] (at most MAX_COUNTED for a cron)."""
    return _count(ticks, first, last)


def _count(ticks: Ticks, first: int, last: int) -> int:
    step = ticks.interval_ms
    if step is not None:  # multiples of the interval: counted, not walked
        return max(0, last // step - (first - 1) // step)
    return len(ticks.between(first, last, MAX_COUNTED))


def tag_task_id(tag: str) -> str:
    """A task id in partition `tag` (as dtq_core.submit.new_task_id makes them)."""
    return f"{tag}-{uuid.uuid4().hex}"


def fire_args(*, tag: str, worker_id: str, name: str, rev: str, fire: FirePlan | None, misfire: str,
              now_ms: int, retention_ms: int, marker_ttl_ms: int, max_depth: int, recent_cap: int,
              busy_elsewhere: bool = False, resume_to: int | None = None,
              catch_up: tuple[int, int] | None = None) -> list[object]:
    """firePeriodic-1's ARGV. A tick: worker_id the leader's, fire its plan. An operator's call
    (worker_id '', fire None): a trigger, one task for now; or, with resume_to (the next tick to
    go on from), a resume, with catch_up (first missed tick, how many) the one task of a
    misfire=run_once resume. busy_elsewhere: the schedule's last task is in another partition and
    not finished (overlap=skip then skips)."""
    busy = 1 if busy_elsewhere else 0
    if fire is None:
        call = "trigger" if resume_to is None else "resume"
        head = [worker_id, name, call, rev, "" if resume_to is None else resume_to, now_ms, iso(now_ms), retention_ms,
                marker_ttl_ms, max_depth, recent_cap, RUNS_KEPT]
        if resume_to is None:
            return [*head, "", "", 0, busy, now_ms, iso(now_ms), tag_task_id(tag)]
        if catch_up is None:
            return [*head, "", "", 0, busy]
        first, count = catch_up
        return [*head, "run_once", first, count, busy, first, iso(first), tag_task_id(tag)]
    mode, first_missed, missed = "", "", 0
    ticks: list[int] = []
    if fire.missed_first is not None:
        mode, first_missed, missed = misfire, str(fire.missed_first), fire.missed_count
        if misfire == "run_once":
            ticks.append(fire.missed_first)
    ticks.extend(fire.on_time)
    flat: list[object] = []
    for tick in ticks:
        flat += [tick, iso(tick), tag_task_id(tag)]
    return [worker_id, name, fire.expected_next, rev, fire.new_next, now_ms, iso(now_ms), retention_ms,
            marker_ttl_ms, max_depth, recent_cap, RUNS_KEPT, mode, first_missed, missed, busy, *flat]
