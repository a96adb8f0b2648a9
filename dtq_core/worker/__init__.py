"""The worker: one module per concern, matching docs/failure-modes.md's "Where it lives" column.

runtime.py    Worker: registration, loop supervision, signals, stop and the drain
fetch.py      consumption: queue refresh, fetch-and-claim, burst mode
execution.py  attempts in flight, handler timeouts, the cancel watcher, the completion writer
liveness.py   heartbeats, clock alignment, the freeze/gap rule (Liveness, pure)
reclaim.py    the visibility reaper
leader.py     scheduler leadership: promotion, stale claims, lost-task sweep
store.py      the worker's Redis calls (WorkerStore)
executor.py   one attempt of a handler, classified for the completion script

The hot-path exchange both this package and dtq_core.scripts use is dtq_core/wire.py.
"""

from .runtime import Worker

__all__ = ["Worker"]
