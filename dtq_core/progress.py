"""A task's progress as a handler reports it (`dtq_tasks.current_task().progress(...)`): the
checks of its arguments and the report the worker writes (dtq_core/worker/progress.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .codec import valid_utf8

MAX_MESSAGE = 200


@dataclass(frozen=True, slots=True)
class Report:
    task_id: str
    attempt: int
    # The attempt's stream entry: its number alone repeats (a DLQ retry starts again at 1, a paused
    # queue's deferral requeues the same one), so the entry is what tells a stale run's report.
    entry_id: str
    done: float
    total: float | None
    message: str

    def args(self) -> list[object]:
        total = "" if self.total is None else number(self.total)
        return [self.task_id, self.entry_id, str(self.attempt), number(self.done), total, self.message]


def number(value: float) -> str:
    """A reported figure as stored: 3 rather than 3.0; repr keeps every digit of the rest."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def checked(done: object, total: object, message: object) -> tuple[float, float | None, str]:
    """The arguments of ctx.progress(), or ValueError/TypeError naming the wrong one."""
    done_ = _finite(done)
    if done_ is None or done_ < 0:
        raise ValueError(f"progress done must be a finite number of at least 0 (got {_shown(done)})")
    total_ = None if total is None else _finite(total)
    if total is not None and (total_ is None or total_ <= 0):
        raise ValueError(f"progress total must be a finite number greater than 0, or None (got {_shown(total)})")
    if not isinstance(message, str):
        raise TypeError(f"progress message must be a string (got {type(message).__name__})")
    # A lone surrogate (a file name decoded with surrogateescape) cannot be sent to Redis: replaced
    # here, as dtq does with every text it stores, or the write of every report due with it fails.
    return done_, total_, valid_utf8(message[:MAX_MESSAGE])


def _finite(value: object) -> float | None:
    """value as a finite float; None for a non-number, NaN, infinity or an int past float's range."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float (math.isfinite would raise it too)
        return None
    return number if math.isfinite(number) else None


def _shown(value: object) -> str:
    """value for an error message: a huge int by its size (its repr may be thousands of digits,
    or refused past sys.get_int_max_str_digits)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    return repr(value)
