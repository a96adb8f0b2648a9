"""Sync handlers (plain `def`, what Django code is) in a fixed set of handler threads
(docs/failure-modes.md: a sync handler that times out, is cancelled, or outlasts the drain).

The event loop hands an attempt over with one SimpleQueue.put; a handler thread runs the whole
attempt (payload decode, the handler, the outcome record) and appends it to a list of finished
attempts, and only the append that finds no delivery pending schedules the loop's `deliver` call:
one loop wake-up (one self-pipe write) per batch of finished attempts, not one per attempt. No
asyncio Task, Future or executor hop per attempt.

A thread that finishes an attempt starts the next one itself when the worker's backlog (claimed
rows waiting for a slot, Worker._backlog) holds a sync row (`take_next`): the slot passes from
one attempt to the next without the loop, a queue hand-off or a thread wake-up; the loop learns of
it with the finished one, in the same delivery.

A thread cannot be interrupted. When the loop gives up on an attempt (its handler timeout, a
cancel request, the drain deadline) it settles the attempt itself, under the same lock a thread
takes to hand its outcome back: exactly one of the two records it. The loop's side then starts
a replacement thread; the given-up thread runs its handler on, detached, drops its result, says
it is gone (`released`) and ends. So there are `size` threads serving plus one per detached
handler, and a detached handler holds its slot until it ends (Worker._free_slots).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .executor import AttemptRunner, Completion, Execution

logger = logging.getLogger("dtq.worker")

Finished = tuple["Execution", "Completion | None"]


class HandlerThreads:
    """The worker's handler threads: submit, give_up and the callbacks run on the event loop."""

    def __init__(self, size: int, runner: AttemptRunner, *,
                 deliver: Callable[[list[Finished], list[Execution]], None],
                 released: Callable[[Execution], None],
                 take_next: Callable[[], Execution | None] = lambda: None, name: str = "dtq-handler") -> None:
        self.size = size
        self.runner = runner
        self.deliver = deliver  # on the loop: attempts that finished, and those threads started, in batches
        self.released = released  # on the loop: a detached handler's thread ended
        self.take_next = take_next  # in a thread, under the lock: the next attempt it may start itself
        self.name = name
        self.on_start: Callable[[], None] | None = None  # on the loop: the threads just started
        self.detached = 0  # threads running a handler the loop gave up on (loop thread only)
        # The drain's detached handlers (entry id -> attempt): their entries stay this worker's,
        # kept fresh by heartbeats, until their threads end.
        self.abandoned: dict[str, Execution] = {}
        self._queue: SimpleQueue[Execution | None] = SimpleQueue()
        self._took = threading.Event()  # set by a thread each time it takes an attempt off the queue
        self._lock = threading.Lock()
        self._finished: list[Finished] = []
        self._started: list[Execution] = []
        self._pending = False  # a delivery is scheduled on the loop
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads = 0
        self._closed = False

    # -- on the event loop ------------------------------------------------------------------------
    @property
    def started(self) -> bool:
        """Whether a sync handler has run here (the threads start with the first)."""
        return self._loop is not None

    def untaken(self) -> bool:
        """Whether an attempt handed over waits for a thread to take it."""
        return not self._queue.empty()

    def submit(self, ex: Execution) -> None:
        if self._loop is None:  # started on first use: a worker of async handlers has none
            self._loop = asyncio.get_running_loop()
            for _ in range(self.size):
                self._spawn()
            if self.on_start is not None:
                self.on_start()
        ex.threads = self
        self._queue.put(ex)

    def let_start(self, timeout_s: float) -> None:
        """Block the loop's thread until a handler thread has taken an attempt handed over, at
        most timeout_s. An idle worker calls it after handing over what one wait brought: the
        handler starts at once and its body's first I/O goes out, where the loop would otherwise
        keep the GIL for the callbacks due in the same turn (the wake channel's message of the
        same ring, about 0.1 ms of Python) while the thread waits for it."""
        if self._queue.empty():
            return
        self._took.clear()
        if not self._queue.empty():  # else a thread took it between the two checks
            self._took.wait(timeout_s)

    @property
    def lock(self) -> threading.Lock:
        """Held while a handler thread takes the next backlog row (take_next)."""
        return self._lock

    def give_up(self, ex: Execution, completion: Completion | None) -> bool:
        """End an attempt whose thread may still be running it, with this outcome (None: leave
        its entry to redelivery); False when its thread already handed its own outcome back."""
        with self._lock:
            if ex.settled:
                return False
            ex.settled = True
        self.detached += 1
        if ex.abandoned:
            self.abandoned[ex.row.entry_id] = ex
        self._spawn()  # the given-up thread leaves once its handler returns
        self.deliver([(ex, completion)], [])
        return True

    def close(self) -> None:
        """Let the serving threads end (detached ones end with their handlers)."""
        self._closed = True
        for _ in range(self._threads):
            self._queue.put(None)

    def _spawn(self) -> None:
        if self._closed:
            return
        self._threads += 1
        # Daemon: a handler stuck past its timeout must not keep the process from exiting.
        threading.Thread(target=self._serve, name=f"{self.name}-{self._threads}", daemon=True).start()

    def _deliver_finished(self) -> None:
        with self._lock:
            finished, self._finished = self._finished, []
            started, self._started = self._started, []
            self._pending = False
        self.deliver(finished, started)

    def _release(self, ex: Execution) -> None:
        self.detached -= 1
        self.abandoned.pop(ex.row.entry_id, None)
        self.released(ex)

    # -- in a handler thread ----------------------------------------------------------------------
    def _next(self) -> Execution | None:
        try:
            return self.take_next()
        except Exception:  # the loop starts the backlog instead
            logger.exception("handler thread could not take the next backlog row")
            return None

    def _serve(self) -> None:
        loop = self._loop
        assert loop is not None
        queue, lock, took = self._queue, self._lock, self._took
        ex = queue.get()
        took.set()
        while ex is not None:
            if not ex.settled:  # given up while queued (a cancel, the drain): nothing to run
                try:
                    completion = self.runner.run_in_thread(ex)
                except Exception:  # a bug of dtq's own: the slot must still come back
                    logger.exception("task_id=%s attempt left to redelivery", ex.row.task_id)
                    completion = None
            nxt = None
            with lock:
                if ex.settled:
                    mine = False
                else:
                    ex.settled = mine = True
                    self._finished.append((ex, completion))
                    nxt = None if self._closed else self._next()
                    if nxt is not None:
                        self._started.append(nxt)
                    wake, self._pending = not self._pending, True
            try:
                if not mine:
                    # The loop recorded this attempt's outcome and started a thread in this one's place.
                    loop.call_soon_threadsafe(self._release, ex)
                    return
                if wake:
                    loop.call_soon_threadsafe(self._deliver_finished)
            except RuntimeError:  # the loop is closed: the worker has exited without this outcome
                return
            if nxt is not None:
                ex = nxt
            else:
                ex = queue.get()
                took.set()
