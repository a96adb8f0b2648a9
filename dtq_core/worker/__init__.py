"""The worker: one module per concern, matching docs/failure-modes.md's "Where it lives" column.

runtime.py   Worker: loop supervision, start/stop, the drain, execution and completion
liveness.py  heartbeats, clock alignment, the freeze/gap rule (Liveness, pure)
fetch.py     consumption: queue refresh, fetch-and-claim, burst mode
reclaim.py   the visibility reaper
leader.py    scheduler leadership: promotion, stale claims, lost-task sweep
store.py     the worker's Redis calls (WorkerStore)
executor.py  one attempt of a handler, classified for the completion script
wire.py      the hot-path exchange (also used by dtq_core.scripts)
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .runtime import Worker

__all__ = ["Worker"]


def __getattr__(name: str) -> Any:
    # Lazy: dtq_core.scripts imports .wire, and the runtime imports dtq_core.scripts (through
    # .store); loading the runtime here eagerly would make that a cycle, and load the whole
    # worker into every web process that only runs scripts.
    if name == "Worker":
        from .runtime import Worker

        return Worker
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
