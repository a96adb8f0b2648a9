"""What the Worker's loops share. Each loop (fetch.py, execution.py, liveness.py, reclaim.py,
leader.py) is a mixin of Worker (runtime.py) working on the Worker's state; this base declares
that state once, with its types, so each mixin is checked on its own. Worker.__init__ and
Worker.run set it; nothing here runs."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import asyncio
    from collections import deque

    import redis.asyncio as aioredis

    from ..clock import Clock
    from ..config import DtqConfig
    from ..keys import Keys
    from .executor import AttemptRunner, Completion, Execution, Row
    from .liveness import Liveness
    from .progress import ProgressReporter
    from .store import Partition, WorkerStore
    from .threads import Finished, HandlerThreads
    from .turnover import Turnover
    from .wake import WakeSubscription


class WorkerState:
    config: DtqConfig
    keys: Keys
    fixed_queues: list[str] | None
    concurrency: int
    worker_id: str
    burst: bool
    max_tasks: int | None
    clock: Clock
    processed: int
    is_leader: bool
    state: str
    liveness: Liveness
    # Set by Worker.run, before any loop starts.
    client: aioredis.Redis
    store: WorkerStore
    wake: WakeSubscription
    runner: AttemptRunner
    threads: HandlerThreads
    progress: ProgressReporter

    _aligned_at: float
    _running: dict[str, Execution]
    _unacked: dict[str, Row]
    _backlog: deque[Row]
    _withheld: list[Row]
    _rated: set[str]
    _turnover: Turnover
    _completions: list[Completion]
    _queues: list[str]
    _served: dict[str, Partition]
    _fetchable: dict[str, Partition]
    _paused_queues: set[str]
    _retry_tags: set[str]
    _fetch_errors: dict[str, str]
    _limit_timers: dict[str, asyncio.TimerHandle]
    _fetch_offset: int
    _list_wait_off_until: float
    _list_waited: str | None
    _refreshed_at: float
    _sweep_at: int
    _running_sweep_at: int
    _stopping: bool
    quiet: bool  # told to take no more tasks (engine.workers.quiet)
    _stop: asyncio.Event
    _beat_failed: bool
    _loading_said: bool
    _redis_back: asyncio.Event
    _slot_freed: asyncio.Event
    _flush_wanted: asyncio.Event
    _flush_lock: asyncio.Lock
    _samples_lock: asyncio.Lock
    _loops: dict[str, asyncio.Task[None]]

    if TYPE_CHECKING:  # Worker's own and the loops', which they call on each other
        def request_stop(self) -> None: ...
        def _info(self) -> dict[str, object]: ...
        def _in_flight_rows(self) -> list[Row]: ...
        async def _pause(self, seconds: float) -> None: ...
        def _free_slots(self) -> int: ...
        def _start(self, row: Row) -> None: ...
        def _finished(self, finished: list[Finished], started: list[Execution]) -> None: ...
        def _start_backlog(self) -> None: ...
        def _thread_released(self, ex: Execution) -> None: ...
        def _take_next(self) -> Execution | None: ...
        def _take_backlog(self) -> list[Row]: ...
        async def _return_withheld(self, why: str) -> None: ...
        def _fetch_room(self) -> int: ...
        def _start_room(self) -> int: ...
