"""Test-only fault points: DTQ_TEST_FAULT names one, and the worker stops its own process
(SIGSTOP) the first time it reaches it, so a test can SIGKILL it, or SIGCONT it, at exactly that
moment instead of hoping a signal lands there. Unset (the default), a point costs a call and one
string comparison. Not for production: a worker that reaches its point stays stopped until
signalled.
"""

from __future__ import annotations

import os
import signal

# Each point sits right after a Redis script returned, where a real crash or pause would leave
# state half-way through a two-step protocol or just past an atomic one.
POINTS = (
    "after_claim_due",  # the scheduler leader moved due ids to its claims, before enqueueDue
    "after_complete",  # completeTasks wrote the outcome and XACKed, before the worker moves on
    "before_outbox_settle",  # a workflow advanced and its ready steps created, its outbox entry not deleted
)

_reached: set[str] = set()


def reach(armed: str, point: str) -> None:
    """Stop this process here if `point` is the armed one (DtqConfig.test_fault), once per process:
    after SIGCONT the worker carries on as if nothing happened."""
    if armed == point and point not in _reached:
        _reached.add(point)
        os.kill(os.getpid(), signal.SIGSTOP)
