"""Consumption (docs/failure-modes.md: a queue paused or deleted under a worker, a stream that
lost its consumer group, burst mode): which partitions this worker serves, and fetching work.

The worker serves every partition (serving and draining: Layout.all_tags) of its queues (--queues)
or of every registered queue, read from the registry every QUEUE_REFRESH_S with the paused index
in the same pipeline; the partitions of a paused queue are not fetched (the fetch script also
checks the pause itself). Which of them may hold unread work is the wake subscription's ready set
(wake.py). Hot path per batch: one fetchTasks call per ready partition, all in one write per
Redis node, the free slots shared fairly among them (fairness.share, rotating the remainder).
An idle worker (nothing ready) waits on the subscription.
"""

from __future__ import annotations

import asyncio
import logging

from .executor import Row
from .fairness import share
from .state import WorkerState
from .store import Fetched, Partition
from .wake import Ticket

logger = logging.getLogger("dtq.worker")

BLOCK_MS = 1000  # longest idle wait on the subscription; bounds how long a stop request waits for the consumer
QUEUE_REFRESH_S = 1.0
# An idle worker's wait on its wake list starts once the sync attempt it just handed over has
# its thread: checked every THREAD_START_S, at most THREAD_START_CHECKS times (1 ms).
THREAD_START_S = 0.00005
THREAD_START_CHECKS = 20
UNBLOCK_GRACE_S = 0.002  # a wake-up heard while blocked on the wake list: how long its own reply may take
LIST_WAIT_BACKOFF_S = 5.0  # after a failed wait on a wake list, the channel alone serves this long
BURST_HORIZON_S = 1.0  # --burst also waits for retries and delayed tasks due this soon
_UNBLOCKING: set[asyncio.Task[None]] = set()  # unblock calls under way (_wait_on_list)


class FetchLoop(WorkerState):
    """The Worker's consumer loop (a mixin of Worker)."""

    async def _refresh_queues(self, force: bool = False) -> None:
        """Read the registry and the paused index (one pipeline) and serve what they say: new
        partitions, and those of a queue that left the paused index, are ready until a fetch
        finds them drained."""
        if not force and self.clock.monotonic() - self._refreshed_at < QUEUE_REFRESH_S:
            return
        layouts, paused = await self.store.layouts_and_paused()
        queues = self.fixed_queues or sorted(layouts)
        partitions = {p.tag: p for q in queues if q in layouts for p in Partition.all_of(layouts[q])}
        fetchable = {tag: p for tag, p in partitions.items() if p.queue not in paused}
        # A resumed queue's entries may have rung while it was paused (a fetch then dropped them).
        resumed = [tag for tag, p in fetchable.items() if p.queue in self._paused_queues]
        self.wake.serve(fetchable)
        self.wake.mark_ready([*resumed, *self._retry_tags])
        self._retry_tags.clear()
        self._queues = [q for q in queues if q in layouts]
        self._served = partitions
        self._fetchable = fetchable
        self._paused_queues = paused
        self._refreshed_at = self.clock.monotonic()
        if paused and self._backlog:
            await self._return_paused_backlog(paused)

    async def _go_quiet(self) -> None:
        """Told to quiet (engine.workers.quiet): fetch nothing more, and hand the claimed rows not
        started back to their streams, uncharged, for peers to run; what runs finishes."""
        await self._hand_back(self._take_backlog(), "quiet")

    async def _return_paused_backlog(self, paused: set[str]) -> None:
        """A paused queue runs nothing new: its claimed rows not started yet go back to their
        streams, uncharged, in their order (returnEntries); on failure they wait in the backlog
        for the next refresh."""
        rows = self._take_backlog()
        self._backlog.extendleft(reversed([row for row in rows if row.queue not in paused]))
        await self._hand_back([row for row in rows if row.queue in paused], "queue paused")

    async def _hand_back(self, held: list[Row], why: str) -> None:
        """Put claimed rows no handler started back in their streams (returnEntries); on failure
        they wait in the backlog for the next try."""
        if not held:
            return
        try:
            returned = await self.store.return_unstarted(held)
        except BaseException:
            self._backlog.extend(held)
            raise
        logger.info("worker_id=%s %s: %d claimed task(s) not started put back in their streams",
                    self.worker_id, why, returned)

    async def _consume(self) -> None:
        while not self._stopping:
            if self.quiet:
                await self._go_quiet()
                return
            await self._refresh_queues()
            # Backlog rows start here, once per wake-up of this loop: attempts that end in the
            # same turn of the event loop free their slots together, and their successors'
            # first I/O, then their completions, go out together.
            self._start_backlog()
            free = self._fetch_room()
            if not self._worth_fetching(free):
                self._slot_freed.clear()
                if not self._worth_fetching(self._fetch_room()) and not self._stopping:
                    await self._slot_freed.wait()
                continue
            if self.fixed_queues and not self._fetchable:  # every queue of --queues is paused (or gone)
                if self.burst:
                    self.request_stop()
                    return
                await self._pause(0.5)
                continue
            rows = await self._fetch(free)
            if rows is None:
                return
            self._backlog.extend(rows)
            if self.quiet or self._stopping:
                # Told to quiet or stop while the fetch was out (a wait's queued fetch runs anyway):
                # nothing it claimed starts; the quiet (or the drain) hands the rows back.
                continue
            idle = not self._running
            self._start_backlog()
            if idle:  # every thread is free: one takes the first sync attempt in microseconds
                self.threads.let_start(THREAD_START_S * THREAD_START_CHECKS)
            # Let the attempts just started reach their first await (their handler's I/O goes
            # out now) before this loop's next fetch: shorter latency on an idle worker.
            await asyncio.sleep(0)

    def _fetch_room(self) -> int:
        """How many rows a fetch may claim: the free slots, plus room in the backlog, which holds
        claimed rows for the slots that free next (started by the handler thread that frees the
        slot, else by this loop): at most as many as attempts ended lately (turnover.py), at most
        `concurrency`. With --max-tasks, no more than the attempts it has left: the rest stays
        queued for the next worker, not claimed and handed back at exit."""
        ahead = min(self.concurrency, self._turnover.lately(self.clock.monotonic())) - len(self._backlog)
        room = self._free_slots() + max(0, ahead)
        if self._rated and not self._rated.isdisjoint(self.wake.ready or self._fetchable):
            # A partition with a rate limit may be fetched: its claims count as its starts
            # (fetchTasks), so nothing is claimed ahead, lest backlog rows crowd it out of the slots.
            room = min(room, self._start_room())
        if self.max_tasks is None:
            return room
        # In flight: running, claimed and waiting, and ended with a completion not written yet.
        in_flight = len(self._running) + len(self._backlog) + len(self._unacked)
        return min(room, self.max_tasks - self.processed - in_flight)

    def _start_room(self) -> int:
        """How many claimed rows could start at once: free slots no backlog row waits for."""
        return max(0, self._free_slots() - len(self._backlog))

    def _worth_fetching(self, room: int) -> bool:
        """While the backlog still feeds the slots, wait for room for half a batch: a fetch per
        freed slot would cost a round trip per task."""
        return room > 0 and (not self._backlog or room >= max(1, self.concurrency // 2))

    async def _fetch(self, free: int) -> list[Row] | None:
        """Claim up to `free` entries of the ready partitions, waiting for work when none is ready;
        None ends a burst."""
        if self.wake.ready:
            return await self._fetch_ready(free)
        if not self.burst:
            partition = self._list_wait_partition()
            if partition is not None:
                return await self._wait_on_list(partition, free)
            await self.wake.wait(BLOCK_MS / 1000)
            return []
        # The scheduler may have queued due work since: when nothing else can come, look at every
        # partition once more before leaving.
        if await self._burst_done():
            rows = await self._sweep(free)
            if not rows:
                self.request_stop()
                return None
            return rows
        self._slot_freed.clear()
        await self.wake.wait(0.05)
        return []

    def _list_wait_partition(self) -> Partition | None:
        """The partition an idle worker waits on with BLPOP (_wait_on_list): its only fetchable
        one, unless a wait failed lately. A worker of several partitions waits on the channel:
        one BLPOP cannot span slots on a cluster, nor one pipelined fetch many partitions cheaply."""
        if len(self._fetchable) != 1 or self._stopping or self.clock.monotonic() < self._list_wait_off_until:
            if self._list_waited is not None:
                # Wake-ups that came while it waited on the list were left to the list's token
                # (below); the channel cannot see that token: fetch the partition once.
                self.wake.mark_ready([self._list_waited])
                self._list_waited = None
            return None
        return next(iter(self._fetchable.values()))

    async def _wait_on_list(self, partition: Partition, free: int) -> list[Row]:
        """Idle, serving one partition: block on its wake list with the fetch queued behind the
        BLPOP (store.wait_and_fetch), so a submit's ring wakes this worker with the task already
        claimed: one round trip from the submit to the claimed row, where the channel takes a
        message and then a fetch. A fetch that leaves work behind passes a token on, so idle
        peers join a backlog in turn. Other wake-ups (a limit's timer, a resubscribe) or a stop
        request end the wait early through this worker's own list (store.unblock), and the
        queued fetch then runs at once. At most BLOCK_MS, so the queue refresh stays on time.
        On any failure the worker waits on the channel alone for LIST_WAIT_BACKOFF_S."""
        for _ in range(THREAD_START_CHECKS):
            # A sync attempt just handed over waits for its thread, which needs the GIL that
            # setting up the wait would hold: let it start first (its body then waits on I/O).
            if not self.threads.untaken():
                break
            await asyncio.sleep(THREAD_START_S)
        tag = partition.tag
        self._list_waited = tag
        sent_at = self.wake.ticket(tag)
        loop = asyncio.get_running_loop()
        grace: asyncio.TimerHandle | None = None  # set by the first change: it then ends the wait
        out = True  # the wait has not returned

        def changed() -> None:
            # Not a message of this partition (the wait's token stands for those): a stop, a
            # limit's timer, a resubscribe. The fetch's reply may be on its way already: it has
            # UNBLOCK_GRACE_S before this worker's own wake list ends the wait.
            nonlocal grace
            if grace is None:
                grace = loop.call_later(UNBLOCK_GRACE_S, unblock)

        def unblock() -> None:
            if out:
                task = loop.create_task(self._unblock(partition))
                _UNBLOCKING.add(task)  # held until it ends: the loop keeps only a weak reference
                task.add_done_callback(_UNBLOCKING.discard)

        self.wake.holding = tag
        self.wake.on_change = changed
        if self.wake.ready:
            changed()
        try:
            # Awaited here, not raced against the wake-ups in tasks of their own (asyncio.wait):
            # the reply resumes this loop in the next turn of the event loop, not three turns later.
            # A cancel closes the line mid-exchange, and Redis drops the queued fetch.
            fetched = await self.store.wait_and_fetch(partition, free, BLOCK_MS / 1000, now=self._start_room())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - Redis away, a wake list overwritten: the channel serves
            self._list_wait_off_until = self.clock.monotonic() + LIST_WAIT_BACKOFF_S
            self.wake.mark_ready([tag])  # the queued fetch may not have run: sweep the partition
            logger.debug("worker_id=%s wait on the wake list of partition %s failed (%s: %s); waiting on the "
                         "channel for %gs", self.worker_id, tag, type(exc).__name__, exc, LIST_WAIT_BACKOFF_S)
            return []
        finally:
            self.wake.holding = None
            self.wake.on_change = None
            out = False  # an unblock not sent yet is not sent
            if grace is not None:
                grace.cancel()
        # The ticket is taken now, not when the wait went out: a wake-up of this partition heard
        # during the wait came from a ring that the fetch either followed (it read that entry) or
        # preceded, and then that ring's token waits on the list for the next wait, or, if the
        # next idle wait is on the channel, _list_wait_partition marks the partition ready.
        if fetched.token and self.wake.ticket(tag) == sent_at:
            # The ring's message has not come yet; it will, and the fetch has read that ring's
            # entries: without this, every task an idle worker took this way would cost a
            # second, empty fetch, and the next task would find the worker in it, not waiting.
            self.wake.covered(tag)
        if tag not in fetched.drained and tag not in fetched.failed:
            self.wake.mark_ready([tag])  # it read what it could take and more may wait
        return self._took(fetched, {tag: self.wake.ticket(tag)})

    async def _unblock(self, partition: Partition) -> None:
        """End this worker's wait on the partition's wake list (store.unblock). A failure needs
        nothing more: the wait fails the same way, or ends by itself within BLOCK_MS."""
        try:
            await self.store.unblock(partition)
        except Exception as exc:  # noqa: BLE001 - see above
            logger.debug("worker_id=%s could not end its wait on partition %s early (%s: %s)",
                         self.worker_id, partition.tag, type(exc).__name__, exc)

    async def _fetch_ready(self, free: int) -> list[Row]:
        """One fetch round: every ready partition asked for its share of the free slots."""
        tags = sorted(self.wake.ready)
        shares = share(free, tags, self._fetch_offset)
        # What each may start at once, the most a rate-limited partition claims (fetchTasks).
        now = dict(share(self._start_room(), tags, self._fetch_offset))
        self._fetch_offset += free % len(tags)  # the remainder goes to the next ones next time
        asks = [(self._fetchable[tag], n) for tag, n in shares]
        tickets = {tag: self.wake.ticket(tag) for tag, _ in shares}
        return self._took(await self.store.fetch(asks, {tag: now.get(tag, 0) for tag, _ in shares}), tickets)

    def _took(self, fetched: Fetched, tickets: dict[str, Ticket]) -> list[Row]:
        """Apply a fetch round to the ready set (tickets: taken as each partition's fetch went out)."""
        for tag in tickets:
            if tag in fetched.rated:
                self._rated.add(tag)
            elif tag not in fetched.failed:
                self._rated.discard(tag)
        if fetched.rated:  # their rows start first: each claim of theirs counted as a start
            fetched.rows.sort(key=lambda row: row.partition_tag not in fetched.rated)
        for tag in fetched.drained:
            self.wake.drained(tag, tickets[tag])
            self._fetch_errors.pop(tag, None)
        for tag, wait_s in fetched.waits.items():
            self._wake_later(tag, wait_s)
        for tag, exc in fetched.failed.items():
            # One partition's fault (a key overwritten by hand) must not stop the others, nor
            # spin: it is dropped until the next wake-up or queue refresh.
            self.wake.drained(tag, tickets[tag])
            self._retry_tags.add(tag)
            if self._fetch_errors.get(tag) != str(exc):
                self._fetch_errors[tag] = str(exc)
                logger.warning("worker_id=%s fetch from partition %s of queue %s failed (%s: %s); trying again "
                               "every %gs", self.worker_id, tag, self._fetchable[tag].queue, type(exc).__name__, exc,
                               QUEUE_REFRESH_S)
        return fetched.rows

    def _wake_later(self, tag: str, wait_s: float) -> None:
        """A partition's rate limit (or a handler's pause) lets nothing start for wait_s: its fetch
        cleared the ready flag, and this worker marks it ready again when the token frees, one
        timer per partition. Meanwhile the other partitions are served as before."""
        timers = self._limit_timers
        if tag in timers:
            return

        def fire() -> None:
            timers.pop(tag, None)
            self.wake.mark_ready([tag])
        timers[tag] = asyncio.get_running_loop().call_later(wait_s, fire)

    async def _sweep(self, free: int) -> list[Row]:
        """Fetch from every partition until one gives work or all are drained."""
        self.wake.mark_ready(self._fetchable)
        while self.wake.ready:
            rows = await self._fetch_ready(free)
            if rows:
                return rows
        return []

    async def _burst_done(self) -> bool:
        """Burst mode ends when nothing waits, runs, or falls due within BURST_HORIZON_S."""
        if self._running or self._unacked or self._completions or self._backlog:
            return False
        horizon = self.clock.now_ms() + int(BURST_HORIZON_S * 1000)
        return not await self.store.due_soon(list(self._served), horizon)
