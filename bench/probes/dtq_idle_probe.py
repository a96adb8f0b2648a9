"""The worker side of `python -m bench.bench_idle_handover` (its worker imports this module through
DTQ_TASK_MODULES; nothing else does).

It stamps, with time.monotonic() (CLOCK_MONOTONIC: one clock for every process of the machine),
three points of an idle worker's path from a submit to the body: the wait on the wake list
returning with the claimed task (WorkerStore.wait_and_fetch), the attempt handed to the handler
threads (HandlerThreads.submit) and a handler thread starting it (AttemptRunner.run_in_thread).
It wraps those methods of whatever dtq tree the worker runs, so an older tree (`--compare`) is
stamped at the same points, as long as it has them.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis

import dtq_tasks
from dtq_core.worker import executor, store, threads

STAMPS: dict[str, dict[str, float]] = {}
# Made at import, before any handler thread: it connects on first use, and no two threads race
# to make it.
_client = redis.Redis.from_url(os.environ["DTQ_REDIS_URL"], socket_timeout=None)


def _stamp(task_id: str, point: str) -> None:
    STAMPS.setdefault(task_id, {})[point] = time.monotonic()


_wait_and_fetch = store.WorkerStore.wait_and_fetch


async def wait_and_fetch(self: Any, *args: Any, **kwargs: Any) -> Any:
    fetched = await _wait_and_fetch(self, *args, **kwargs)
    for row in fetched.rows:
        _stamp(row.task_id, "returned")
    return fetched


_submit = threads.HandlerThreads.submit


def submit(self: Any, ex: Any) -> None:
    _stamp(ex.row.task_id, "handed")
    _submit(self, ex)


_run_in_thread = executor.AttemptRunner.run_in_thread


def run_in_thread(self: Any, ex: Any) -> Any:
    _stamp(ex.row.task_id, "thread")
    return _run_in_thread(self, ex)


store.WorkerStore.wait_and_fetch = wait_and_fetch  # type: ignore[method-assign]
threads.HandlerThreads.submit = submit  # type: ignore[method-assign]
executor.AttemptRunner.run_in_thread = run_in_thread  # type: ignore[method-assign]


@dtq_tasks.task("bench.handover")
def handover(payload: Any) -> None:
    """The body: stamped, then one INCR (the counter the driver watches)."""
    _stamp(dtq_tasks.current_task().task_id, "body")  # type: ignore[union-attr]
    _client.incr(payload["k"])


@dtq_tasks.task("bench.handover_dump")
def dump(payload: Any) -> None:
    """Write the stamps to the driver's file and forget them."""
    with open(payload["path"], "w") as f:
        json.dump(STAMPS, f)
    STAMPS.clear()
