"""A task's progress as a handler reports it (`dtq_tasks.current_task().progress(...)`): the
checks of its arguments and the report the worker writes (dtq_core/worker/progress.py)."""

from __future__ import annotations

import math
from dataclasses import dataclass

MAX_MESSAGE = 200


@dataclass(frozen=True, slots=True)
class Report:
    task_id: str
    attempt: int
    done: float
    total: float | None
    message: str

    def args(self) -> list[object]:
        total = "" if self.total is None else number(self.total)
        return [self.task_id, str(self.attempt), number(self.done), total, self.message]


def number(value: float) -> str:
    """A reported figure as stored: 3 rather than 3.0; repr keeps every digit of the rest."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def checked(done: object, total: object, message: object) -> tuple[float, float | None, str]:
    """The arguments of ctx.progress(), or ValueError/TypeError naming the wrong one."""
    if isinstance(done, bool) or not isinstance(done, (int, float)) or not math.isfinite(done) or done < 0:
        raise ValueError(f"progress done must be a finite number of at least 0 (got {done!r})")
    if total is not None and (isinstance(total, bool) or not isinstance(total, (int, float))
                              or not math.isfinite(total) or total <= 0):
        raise ValueError(f"progress total must be a finite number greater than 0, or None (got {total!r})")
    if not isinstance(message, str):
        raise TypeError(f"progress message must be a string (got {type(message).__name__})")
    return float(done), None if total is None else float(total), message[:MAX_MESSAGE]
