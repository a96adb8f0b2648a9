"""The task state machine and the pure rules around it (retry delay, classification).

Lua scripts enforce these transitions atomically; this module documents them for Python and
for the tests that walk every (state, script) pair.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Status(StrEnum):
    PENDING = "PENDING"
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    RETRYING = "RETRYING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    DEAD_LETTERED = "DEAD_LETTERED"
    CANCELLED = "CANCELLED"
    EXPIRED = "EXPIRED"


TERMINAL: Final = frozenset(
    {Status.SUCCEEDED, Status.FAILED, Status.DEAD_LETTERED, Status.CANCELLED, Status.EXPIRED}
)

TRANSITIONS: Final[dict[Status, frozenset[Status]]] = {
    Status.PENDING: frozenset({Status.QUEUED, Status.CANCELLED, Status.EXPIRED}),
    Status.QUEUED: frozenset({Status.RUNNING, Status.CANCELLED, Status.EXPIRED}),
    Status.RUNNING: frozenset(
        {Status.RUNNING, Status.SUCCEEDED, Status.RETRYING, Status.FAILED, Status.DEAD_LETTERED,
         Status.CANCELLED}
    ),  # RUNNING -> RUNNING is the crash-redelivery attempt increment
    Status.RETRYING: frozenset({Status.QUEUED, Status.CANCELLED, Status.EXPIRED}),
    Status.SUCCEEDED: frozenset(),
    Status.FAILED: frozenset(),
    Status.DEAD_LETTERED: frozenset({Status.QUEUED}),  # an operator's DLQ retry
    Status.CANCELLED: frozenset(),
    Status.EXPIRED: frozenset(),
}

QUEUE_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
RESERVED_QUEUES: Final = frozenset({"dlq", "audit"})
TASK_TYPE_RE: Final = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:-]{0,199}")


class Outcome(StrEnum):
    """How one attempt ended, as the worker reports it to the completion script."""

    SUCCEEDED = "ok"
    RETRY = "retry"
    FAILED = "fail"
    CANCELLED = "cancel"
    LIMITED = "limited"  # RateLimited: back to wait, not an attempt (includes/limits.lua)


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    base_s: float
    max_s: float


def can_transition(current: Status, target: Status) -> bool:
    return target in TRANSITIONS[current]


def retry_delay_s(attempt: int, policy: RetryPolicy, rng: random.Random | None = None) -> float:
    """Exponential backoff with full jitter: uniform(0, min(max, base * 2**(attempt-1)))."""
    ceiling = min(policy.max_s, policy.base_s * (2 ** max(0, attempt - 1)))
    return (rng or random).uniform(0, ceiling)


def next_attempt_at(
    *, attempt: int, max_attempts: int, now_ms: int, policy: RetryPolicy, rng: random.Random | None = None
) -> int | None:
    """Return when to retry (epoch ms), or None when the task is out of attempts."""
    if attempt >= max_attempts:
        return None
    return now_ms + int(retry_delay_s(attempt, policy, rng) * 1000)


def valid_queue_name(name: object) -> bool:
    return isinstance(name, str) and bool(QUEUE_NAME_RE.fullmatch(name)) and name not in RESERVED_QUEUES
