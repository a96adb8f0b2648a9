"""Running attempts and writing their completions (docs/failure-modes.md: a handler that times
out, is cancelled, or starts on a claim a peer took over meanwhile; a completion whose reply was
lost): the attempts in flight, their handler timeouts and cancel requests, and the completion
writer, one completeTasks script for everything that finished since its last write.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from .. import faults, hooks, registry
from ..task import TERMINAL, Outcome
from .executor import EXACT_TIMEOUT_BELOW_S, TIMEOUT_CHECK_S, Completion, Execution, Row, cancel, expire, expire_overdue
from .samples import FLUSH_EVERY_S
from .state import WorkerState
from .threads import Finished
from .workflows import WorkflowDriver

logger = logging.getLogger("dtq.worker")


class ExecutionLoops(WorkerState):
    """The Worker's attempts, completion writer, handler-timeout check and cancel watcher (a mixin
    of Worker)."""

    # -- execution ----------------------------------------------------------------------------
    def _start_backlog(self) -> None:
        """Start claimed rows waiting in the backlog, as many as there are free slots; none once a
        stop is requested (the drain hands them back)."""
        if self._stopping:
            return
        backlog = self._backlog
        while backlog and self._free_slots() > 0:
            try:
                row = backlog.popleft()
            except IndexError:  # a handler thread took the last one meanwhile
                return
            self._start(row)

    def _take_next(self) -> Execution | None:
        """In a handler thread that just finished an attempt (HandlerThreads holds its lock): the
        backlog's next row, started in that thread, when it is a sync handler's that needs no
        re-check; None leaves the backlog to the loop."""
        backlog = self._backlog
        if self._stopping or self.quiet or not backlog:  # quiet: the loop hands the backlog back
            return None
        try:
            row = backlog.popleft()
        except IndexError:
            return None
        handler = registry.get(row.handler or row.type)
        now = self.clock.monotonic()
        if handler is None or handler.is_async or now - row.received_at > self.config.stale_start_s:
            backlog.appendleft(row)
            return None
        return Execution(row, in_thread=True, handler=handler, threads=self.threads, started=time.perf_counter(),
                         deadline=now + row.timeout_s)

    def _start(self, row: Row) -> None:
        ex = Execution(row)
        self._running[row.entry_id] = ex
        handler = registry.get(row.handler or row.type)
        stale = self.clock.monotonic() - row.received_at > self.config.stale_start_s
        if handler is not None and not handler.is_async and not stale:
            self._to_thread(ex, handler)  # the common sync case: no asyncio Task at all
        else:
            ex.task = asyncio.get_running_loop().create_task(self._execute(ex, handler))

    def _to_thread(self, ex: Execution, handler: registry.Registered) -> None:
        """Hand a sync handler's attempt to the handler threads (threads.py); its outcome comes
        back through _finished."""
        ex.in_thread, ex.handler = True, handler
        ex.started = time.perf_counter()
        timeout_s = ex.row.timeout_s
        ex.deadline = self.clock.monotonic() + timeout_s
        if timeout_s < EXACT_TIMEOUT_BELOW_S:
            ex.timer = asyncio.get_running_loop().call_later(timeout_s, expire, ex)
        self.threads.submit(ex)

    async def _execute(self, ex: Execution, handler: registry.Registered | None) -> None:
        completion: Completion | None = None
        try:
            if self.clock.monotonic() - ex.row.received_at > self.config.stale_start_s:
                try:
                    ours = await self._still_ours(ex.row)
                except asyncio.CancelledError:
                    if not ex.cancel_requested:
                        raise  # the drain abandoned it: its entry is left for a peer
                    completion = Completion(ex.row, Outcome.CANCELLED)  # fenced if it is no longer ours
                    return
                if not ours:  # a cancelled one ends CANCELLED here; one a peer took is left alone
                    self._withheld.append(ex.row)
                    await self._try_return_withheld("claim re-checked")
                    return
                if handler is not None and not handler.is_async:
                    self._to_thread(ex, handler)
                    return  # still running: its thread hands the outcome back
            completion = await self.runner.run(ex)
        finally:
            if not ex.in_thread:
                self._ended(ex, completion)

    def _ended(self, ex: Execution, completion: Completion | None) -> None:
        self._running.pop(ex.row.entry_id, None)
        self._turnover.ended(1, self.clock.monotonic())
        self.progress.forget(ex.row.task_id, ex.row.entry_id)
        if completion is not None:
            self._unacked[ex.row.entry_id] = ex.row
            self._completions.append(completion)
            self._flush_wanted.set()
        self._slot_freed.set()  # the consumer starts backlog rows in the freed slots

    def _thread_released(self, ex: Execution) -> None:
        """A detached handler's thread ended: its slot is free again."""
        self._slot_freed.set()

    def _finished(self, finished: list[Finished], started: list[Execution]) -> None:
        """Attempts the handler threads started from the backlog, and those they (or the loop,
        giving up on one) ended: one call a batch. Started first: one may be in both."""
        running, unacked, completions = self._running, self._unacked, self._completions
        if started:
            loop = asyncio.get_running_loop()
            now = self.clock.monotonic()
            for ex in started:
                running[ex.row.entry_id] = ex
                if ex.row.timeout_s < EXACT_TIMEOUT_BELOW_S:
                    ex.timer = loop.call_later(max(0.0, ex.deadline - now), expire, ex)
        for ex, completion in finished:
            if ex.timer is not None:
                ex.timer.cancel()
            running.pop(ex.row.entry_id, None)
            self.progress.forget(ex.row.task_id, ex.row.entry_id)
            if completion is not None:
                unacked[ex.row.entry_id] = ex.row
                completions.append(completion)
        if finished:
            self._turnover.ended(len(finished), self.clock.monotonic())
            self._flush_wanted.set()
        self._slot_freed.set()

    async def _still_ours(self, row: Row) -> bool:
        """Re-check a claim this worker sat on (its process stalled, or its loop was blocked):
        meanwhile a peer may have reclaimed the entry and run, finished or cancelled the task."""
        try:
            ours = await self.store.claim_still_ours(row)
        except Exception as exc:  # noqa: BLE001 - cannot tell: run it (skipping would cost it an attempt)
            logger.warning("task_id=%s worker_id=%s attempt=%d claim held %.1fs could not be checked (%s); "
                           "running it (its completion is fenced if a peer took it over)", row.task_id,
                           self.worker_id, row.attempt, self.clock.monotonic() - row.received_at, exc)
            return True
        if not ours:
            logger.warning("task_id=%s worker_id=%s attempt=%d was claimed %.1fs ago and has since been taken "
                           "over (reclaimed, finished or cancelled by a peer); not running it", row.task_id,
                           self.worker_id, row.attempt, self.clock.monotonic() - row.received_at)
        return ours

    # -- completion ---------------------------------------------------------------------------
    async def _flush_loop(self) -> None:
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted.clear()
            await self._flush_once()

    async def _samples_loop(self) -> None:
        """Write the completions' statistics samples about once a second (worker/samples.py)."""
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            async with self._samples_lock:
                await self.store.write_samples()

    async def _flush_once(self) -> None:
        advance: dict[str, list[str]] = {}
        async with self._flush_lock:
            await self._flush_locked(advance)
        if advance:
            await self._advance_workflows(advance)

    async def _advance_workflows(self, items: dict[str, list[str]]) -> None:
        """Advance the workflows of the steps that just ended (worker/workflows.py). A failure is
        logged: the outbox entries stay, and the leader re-drives them."""
        try:
            await WorkflowDriver(self.store).drive(items)
        except Exception as exc:  # noqa: BLE001 - the outbox keeps the work; the leader re-drives it
            logger.warning("worker_id=%s advancing workflows failed (%s: %s); the leader will re-drive them",
                           self.worker_id, type(exc).__name__, exc)

    async def _flush_locked(self, advance: dict[str, list[str]]) -> None:
        batch, self._completions = self._completions, []
        if not batch:
            return
        try:
            statuses = await self.store.complete(batch)
        except BaseException:
            self._completions[:0] = batch  # keep them; the entries stay pending until written
            self._flush_wanted.set()
            raise
        faults.reach(self.config.test_fault, "after_complete")
        for completion, status in zip(batch, statuses, strict=True):
            self._unacked.pop(completion.row.entry_id, None)
            if completion.row.workflow and (isinstance(status, list) or status == "resent" or status in TERMINAL):
                # A workflow's step ended (or an earlier send recorded its end): its outbox entry
                # is advanced after the lock. A task of no workflow pays this one check.
                advance.setdefault(completion.row.partition_tag, []).append(completion.row.task_id)
            if isinstance(status, list):  # ["quarantined", new status, reason]: its record is corrupt
                logger.error("task_id=%s queue=%s attempt=%d worker_id=%s quarantined as dtq.CorruptRecord "
                             "(%s): %s", completion.row.task_id, completion.row.queue, completion.row.attempt,
                             self.worker_id, status[1] or "task record unwritable", status[2])
            elif status == "resent":
                logger.info("task_id=%s attempt=%d worker_id=%s completion re-sent after a lost reply: already "
                            "recorded", completion.row.task_id, completion.row.attempt, self.worker_id)
            elif status == "fenced":
                logger.warning("task_id=%s attempt=%d worker_id=%s result discarded: a newer attempt owns it",
                               completion.row.task_id, completion.row.attempt, self.worker_id)
            elif status in ("DEAD_LETTERED", "FAILED"):
                # The one place a handler failure ends the task: say where it went and why.
                logger.warning("task_id=%s queue=%s attempt=%d worker_id=%s %s: %s: %s",
                               completion.row.task_id, completion.row.queue, completion.row.attempt,
                               self.worker_id, "moved to the DLQ" if status == "DEAD_LETTERED" else "failed",
                               completion.error_class, completion.error_message[:200])
                if status == "DEAD_LETTERED" and hooks.SIGNALS is not None:
                    row = completion.row
                    hooks.send("task_dead_lettered", task_id=row.task_id, type=row.type, queue=row.queue,
                               attempt=row.attempt, error_class=completion.error_class,
                               error_message=completion.error_message)
        # Counted before the next await: _fetch_room's count of what is in flight no longer has them.
        self.processed += len(batch)
        if self.max_tasks is not None:
            if self.processed >= self.max_tasks:
                self.request_stop()
            self._slot_freed.set()  # with --max-tasks, a written completion is room for the next fetch
        await self._pause_other_partitions(batch, statuses)

    async def _pause_other_partitions(self, batch: list[Completion], statuses: list[Any]) -> None:
        """A handler's RateLimited(scope="queue") paused its own partition (completeTasks); the
        queue's other partitions get the same pause here. Best effort: a failure is logged, the
        partition the task came from is paused whatever happens."""
        pauses: dict[str, tuple[int, str]] = {}
        for completion, status in zip(batch, statuses, strict=True):
            if completion.outcome is Outcome.LIMITED and completion.limit_scope == "queue" and status == "PENDING":
                queue, until = completion.row.queue, completion.retry_due_ms
                if until > pauses.get(queue, (0, ""))[0]:
                    pauses[queue] = (until, completion.row.partition_tag)
        for queue, (until, own) in pauses.items():
            tags = [tag for tag, p in self._served.items() if p.queue == queue and tag != own]
            try:
                await self.store.pause_partitions(tags, until)
            except Exception as exc:  # noqa: BLE001 - the task's own partition is paused already
                logger.warning("worker_id=%s queue %s: pausing its other partitions after RateLimited failed "
                               "(%s: %s)", self.worker_id, queue, type(exc).__name__, exc)

    # -- heartbeat, reaper, cancel watcher ----------------------------------------------------
    async def _timeout_loop(self) -> None:
        while True:
            await asyncio.sleep(TIMEOUT_CHECK_S)
            if self._running:
                expire_overdue(list(self._running.values()), self.clock.monotonic())

    async def _cancel_watch_loop(self) -> None:
        """Every cancel_poll_s, the cancel requests of the attempts running and of the backlog's rows
        (claimed, RUNNING, not started), in one pipeline: the same round trip as for the running
        ones alone. A cancelled backlog row never starts: it goes back through returnEntries, which
        ends it CANCELLED. Withheld rows whose return failed (Redis away) are tried again first."""
        while True:
            await asyncio.sleep(self.config.cancel_poll_s)
            if self._withheld:
                await self._try_return_withheld("retry")
            running = [ex for ex in self._running.values() if not ex.cancel_requested]
            waiting = list(self._backlog)
            if not running and not waiting:
                continue
            flags = await self.store.cancel_flags([ex.row.task_id for ex in running] + [row.task_id for row in waiting])
            for ex, flag in zip(running, flags, strict=False):
                if flag and cancel(ex):
                    logger.info("task_id=%s worker_id=%s cancelled on request", ex.row.task_id, self.worker_id)
            cancelled = {row.entry_id for row, flag in zip(waiting, flags[len(running):], strict=True) if flag}
            if cancelled:
                self._withhold(cancelled)
                await self._try_return_withheld("cancel requested")

    async def _try_return_withheld(self, why: str) -> None:
        """_return_withheld for the cancel watcher: a hand-back that fails (on a cluster, the rows'
        master is down) leaves them withheld for the next poll, and the watcher goes on reading
        the cancels of the attempts it runs."""
        try:
            await self._return_withheld(why)
        except Exception as exc:  # noqa: BLE001 - kept withheld and heartbeated; tried again next poll
            logger.debug("worker_id=%s handing back %d withheld row(s) failed (%s: %s)", self.worker_id,
                         len(self._withheld), type(exc).__name__, exc)

    def _withhold(self, entry_ids: set[str]) -> None:
        """Take these rows out of the backlog, so that they never start; one started while the
        flags were read is cancelled as a running attempt is (one a handler thread has just taken,
        not yet reported, is at the next poll)."""
        with self.threads.lock:  # no handler thread takes a backlog row meanwhile (_take_next)
            backlog = self._backlog
            rows = list(backlog)
            backlog.clear()
            backlog.extend(row for row in rows if row.entry_id not in entry_ids)
        self._withheld += [row for row in rows if row.entry_id in entry_ids]
        for entry_id in entry_ids.difference(row.entry_id for row in rows):
            ex = self._running.get(entry_id)
            if ex is not None and cancel(ex):
                logger.info("task_id=%s worker_id=%s cancelled on request", ex.row.task_id, self.worker_id)

    async def _return_withheld(self, why: str) -> None:
        """Put the withheld rows back in their streams, uncharged (returnEntries; one cancelled
        meanwhile ends CANCELLED, one no longer this worker's claim is left alone). On failure they
        stay withheld, reported to heartbeats (_in_flight_rows), for the next try."""
        rows, self._withheld = self._withheld, []
        if not rows:
            return
        try:
            returned = await self.store.return_unstarted(rows)
        except BaseException:
            self._withheld[:0] = rows
            raise
        logger.info("worker_id=%s %s: %d claimed task(s) not started put back in their streams, %d not (cancelled, "
                    "or no longer this worker's)", self.worker_id, why, returned, len(rows) - returned)
