"""Progress that handlers report (`dtq_tasks.current_task().progress(done, total, message)`),
written to their task records at most once per task per DTQ_PROGRESS_MIN_INTERVAL_S.

A handler's call never waits for Redis: it leaves its value here (from a handler thread or the
event loop) and returns. One loop writes what is due, every partition's reports in one
reportProgress call, all in one round trip; a value reported again before its turn replaces the
one waiting, so the latest value is the one written and a tight loop of calls costs one write per
interval. The script is fenced on the attempt and its stream entry: a report that arrives after
the task ended, or after a peer took it over, changes nothing. Reports wait here per attempt (task
id and entry), as the script fences them: a run that outlived its attempt (a sync handler's
thread after its timeout) and the task's next run on this worker do not replace each other's. A
report still waiting when its attempt ends is dropped: the task's end is what the record shows
then.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
from typing import Any

from ..clock import Clock, iso
from ..keys import tag_of
from ..progress import Report
from .store import WorkerStore

logger = logging.getLogger("dtq.worker")


class ProgressReporter:
    """The worker's progress writer: `offer` from any thread, `run` on the worker's loop."""

    def __init__(self, store: WorkerStore, clock: Clock, interval_s: float) -> None:
        self.store = store
        self.clock = clock
        self.interval_s = interval_s
        self._lock = threading.Lock()
        # task id -> entry id -> the latest value not yet written / clock.monotonic() of its last write
        self._waiting: dict[str, dict[str, Report]] = {}
        self._written_at: dict[str, dict[str, float]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None
        self.writes = 0  # script calls' records written (tests, logs)

    def offer(self, report: Report) -> None:
        """Leave a report for the writer; returns at once. Called by ctx.progress()."""
        with self._lock:
            waiting = self._waiting.setdefault(report.task_id, {})
            first = report.entry_id not in waiting
            waiting[report.entry_id] = report
        loop, wake = self._loop, self._wake
        if first and loop is not None and wake is not None:
            try:
                loop.call_soon_threadsafe(wake.set)
            except RuntimeError:  # the loop closed: the worker is gone, and the report with it
                pass

    def forget(self, task_id: str, entry_id: str | None = None) -> None:
        """The attempt ended: drop its waiting report and its pace (without entry_id: those of
        every attempt of the task)."""
        if self._written_at or self._waiting:
            with self._lock:
                if entry_id is None:
                    self._waiting.pop(task_id, None)
                    self._written_at.pop(task_id, None)
                else:
                    _drop(self._waiting, task_id, entry_id)
                    _drop(self._written_at, task_id, entry_id)

    async def run(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        wait: float | None = None
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), wait)
            except TimeoutError:
                pass
            self._wake.clear()
            due, wait = self._take_due(self.clock.monotonic())
            if due:
                await self._write(due)

    def _take_due(self, now: float) -> tuple[list[Report], float | None]:
        """The reports whose task's interval has passed (taken out), and how long until the next."""
        due: list[Report] = []
        next_in: float | None = None
        with self._lock:
            for task_id, waiting in list(self._waiting.items()):
                written = self._written_at.get(task_id, {})
                for entry_id in list(waiting):
                    ready_at = written.get(entry_id, -math.inf) + self.interval_s
                    if ready_at <= now:
                        due.append(waiting.pop(entry_id))
                        self._written_at.setdefault(task_id, {})[entry_id] = now
                    else:
                        next_in = min(next_in if next_in is not None else math.inf, ready_at - now)
                if not waiting:
                    del self._waiting[task_id]
        return due, next_in

    async def _write(self, due: list[Report]) -> None:
        by_tag: dict[str, list[object]] = {}
        for report in due:
            by_tag.setdefault(tag_of(report.task_id), []).extend(report.args())
        now = self.clock.now_ms()
        events = await self.store.events.aflag(self.store.client)
        pipe = self.store.client.pipeline(transaction=False)
        for tag, flat in by_tag.items():
            await self.store.scripts("reportProgress", keys=[self.store.keys.partition(tag)],
                                     args=[now, iso(now), events, *flat], client=pipe)
        try:
            replies = await self.store.scripts.aexecute(pipe, raise_on_error=False)
        except Exception as exc:  # noqa: BLE001 - progress is a hint: the task runs on
            logger.warning("worker_id=%s progress of %d task(s) not written (%s: %s)", self.store.worker_id,
                           len(due), type(exc).__name__, exc)
            return
        self.writes += sum(r for r in replies if isinstance(r, int))
        # One call per partition, each its own reply: a partition's error leaves the others written.
        failed = [r for r in replies if isinstance(r, Exception)]
        if failed:
            logger.warning("worker_id=%s progress of %d of %d partition(s) not written (%s: %s)",
                           self.store.worker_id, len(failed), len(replies), type(failed[0]).__name__, failed[0])


def _drop(runs: dict[str, dict[str, Any]], task_id: str, entry_id: str) -> None:
    entries = runs.get(task_id)
    if entries is not None:
        entries.pop(entry_id, None)
        if not entries:
            del runs[task_id]
