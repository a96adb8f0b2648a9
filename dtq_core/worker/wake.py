"""Which partitions may hold work this worker has not read yet (docs/failure-modes.md: a lost
wake-up, a subscription cut by a Redis restart or a network fault).

Every script that adds an entry to a partition sets its ready flag and, when the flag was not
set, publishes the partition's tag on the wake channel (ring in includes/common.lua); a fetch
that reads the partition to its end clears the flag and says so. A worker keeps its own ready
set on one subscription to that channel, whatever the number of queues or nodes:

- a wake message adds its tag; an idle worker (an empty ready set) waits on the subscription;
- on every (re)subscribe every served tag is ready: messages published while the worker was not
  subscribed are lost, so it sweeps every partition once (a fetch each) instead;
- a fetch that comes back with its partition drained removes the tag, unless the tag was woken
  (or marked ready) after that fetch was sent: a per-tag count of wake-ups, read when the fetch
  goes out (`ticket`) and compared when its reply comes back (`drained`). A submit that lands
  between the script's clear and its reply therefore keeps the tag, whichever of the reply and
  the message arrives first: no wake-up is lost.

While the flag is set, every subscribed worker has the tag in its set or a message for it on the
way, so a partition left ready by a full batch needs no new message.

On Redis Cluster a PUBLISH reaches every node, so any node will do for the subscription. redis-py
subscribes through the master of the channel's slot; when that fails, the next attempt goes
through the next node in the slot map (replicas included), not that master again: a master that
died stays in the slot map until its replica is promoted (seconds, or for good when none can be),
and meanwhile the partitions on the other masters must still be heard.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster

from .. import events

logger = logging.getLogger("dtq.worker")

PING_EVERY_S = 5.0  # a silent subscription is checked this often; no answer by the next check: reconnect
MAX_BACKOFF_S = 2.0  # between two subscribe attempts while Redis is away (cut short by retry_now)

Ticket = tuple[int, int]


class WakeSubscription:
    """The worker's ready set, kept by one subscription to the wake channel."""

    def __init__(self, client: aioredis.Redis, channel: str, worker_id: str) -> None:
        self.client = client
        self.channel = channel
        self.worker_id = worker_id
        self.ready: set[str] = set()
        self._served: frozenset[str] = frozenset()
        self._woken: dict[str, int] = {}  # per served tag: wake-ups (messages and marks) so far
        self._covered: set[str] = set()  # tags whose next message is for a ring a fetch already read
        self.holding: str | None = None  # the tag whose wake list this worker waits on now (fetch.py)
        self._epoch = 0  # subscriptions so far: a resubscribe marks every tag at once
        self._changed = asyncio.Event()  # a tag became ready
        # Called, on the loop, when a tag becomes ready (or on poke) while a wait on a wake list
        # is out (fetch.py, _wait_on_list): that wait is ended early. None: nobody to tell.
        self.on_change: Callable[[], None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.subscribed = False
        self._failures = 0  # subscriptions lost in a row (for the backoff and the log)
        self._failed_node = ""  # on a cluster, the node whose subscription failed last
        self._retry = asyncio.Event()  # set by retry_now: Redis answers again, subscribe at once

    @property
    def subscriptions(self) -> int:
        """Subscriptions made so far: more than one means it was lost and came back."""
        return self._epoch

    # -- the ready set --------------------------------------------------------------------------
    def serve(self, tags: Iterable[str]) -> None:
        """Serve these tags from now on; tags new to the set are ready (swept once)."""
        served = frozenset(tags)
        new = served - self._served
        self._served = served
        self.ready &= served
        for tag in list(self._woken):
            if tag not in served:
                del self._woken[tag]
        self._covered &= served
        self.mark_ready(new)

    def mark_ready(self, tags: Iterable[str]) -> None:
        """Treat tags as woken: their queue was resumed, a fetch of them failed, ..."""
        added = False
        for tag in tags:
            if tag in self._served:
                self._woken[tag] = self._woken.get(tag, 0) + 1
                self.ready.add(tag)
                added = True
        if added:
            self._signal()

    def covered(self, tag: str) -> None:
        """The tag's next message is for the ring whose token a wait on its wake list took, and
        whose entries the fetch queued behind that wait read (fetch.py, _wait_on_list): hearing
        it must not send the worker to fetch again. Were it another ring's message, that ring
        left its token on the list, where this worker's next idle wait (or a peer's) takes it."""
        self._covered.add(tag)

    def ticket(self, tag: str) -> Ticket:
        """Where the tag's wake-ups stand, taken as a fetch of it goes out."""
        return self._epoch, self._woken.get(tag, 0)

    def drained(self, tag: str, ticket: Ticket) -> None:
        """A fetch sent at `ticket` cleared the tag's ready flag: drop the tag, unless it was woken
        since (that wake-up may be for an entry added after the clear)."""
        if self.ticket(tag) == ticket:
            self.ready.discard(tag)

    async def wait(self, timeout_s: float) -> bool:
        """Wait up to timeout_s for a tag to become ready; True when one is."""
        if self.ready:
            return True
        self._changed.clear()
        try:
            async with asyncio.timeout(timeout_s):  # no task of its own, unlike wait_for: a faster wake-up
                await self._changed.wait()
        except TimeoutError:
            pass
        return bool(self.ready)

    def retry_now(self) -> None:
        """Redis answers again (a heartbeat landed): end a backoff before subscribing again."""
        self._retry.set()

    def poke(self) -> None:
        """End a wait early (the worker is stopping)."""
        self._signal()

    def _signal(self) -> None:
        self._changed.set()
        if self.on_change is not None:
            self.on_change()

    def _resubscribed(self) -> None:
        self._epoch += 1
        self._covered.clear()
        if self._served:
            self.ready = set(self._served)
            self._signal()

    def _woke(self, tag: str) -> None:
        if tag in self._covered:
            self._covered.discard(tag)
            return
        if tag == self.holding:
            # Waiting on that partition's wake list: the ring left its token there, for this
            # wait or a peer's, whose fetch passes a token on when more is left. Ending this
            # wait would only put this worker behind the one that took the token (Redis serves
            # blocked workers in turn), so the same worker would win every ring.
            self._woken[tag] = self._woken.get(tag, 0) + 1
            return
        if tag in self._served:
            self._woken[tag] = self._woken.get(tag, 0) + 1
            if tag not in self.ready:
                self.ready.add(tag)
                self._signal()

    # -- the subscription -------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._listen(), name="dtq-wake")

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _listen(self) -> None:
        """Stay subscribed: on any failure back off, subscribe again and sweep."""
        while True:
            pubsub = self._pubsub()
            try:
                await pubsub.subscribe(self.channel)
                await self._read(pubsub)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - a lost subscription is retried, never fatal
                self.subscribed = False
                self._failures += 1
                node = getattr(pubsub, "node", None)  # a cluster's: the node it went through
                self._failed_node = str(node.name) if node is not None else ""
                delay = min(MAX_BACKOFF_S, 0.1 * 2 ** min(self._failures, 6))
                # Once per outage; a loading Redis is said once for every loop by the supervisor.
                quiet = self._failures > 1 or isinstance(exc, redis.exceptions.BusyLoadingError)
                log = logger.debug if quiet else logger.warning
                log("worker_id=%s wake subscription lost (%s: %s); subscribing again in %.1fs (then every "
                    "partition is swept once)", self.worker_id, type(exc).__name__, exc, delay)
                self._retry.clear()
                try:
                    await asyncio.wait_for(self._retry.wait(), delay)
                except TimeoutError:
                    pass
            finally:
                await asyncio.shield(_close_quietly(pubsub))

    def _pubsub(self) -> aioredis.client.PubSub:
        """A PubSub; on a cluster, after a failure, through the node after the one that failed."""
        client = self.client
        if not isinstance(client, aiocluster.RedisCluster) or not self._failed_node:
            return client.pubsub()
        nodes = sorted(client.get_nodes(), key=lambda n: str(n.name))
        names = [str(n.name) for n in nodes]
        after = names.index(self._failed_node) + 1 if self._failed_node in names else 0
        return client.pubsub(node=nodes[after % len(nodes)]) if nodes else client.pubsub()

    async def _read(self, pubsub: aioredis.client.PubSub) -> None:
        pinged = False
        while True:
            message = await pubsub.get_message(timeout=PING_EVERY_S)
            if message is None:
                # Silence: a wake-up may simply not have come, or the connection died without a
                # word (a network fault). A PING tells them apart by the next check.
                if pinged:
                    raise ConnectionError(f"no answer to PING within {PING_EVERY_S:g}s")
                await pubsub.ping()
                pinged = True
                continue
            pinged = False
            kind = message["type"]
            if kind == "message":
                data = str(message["data"])
                if data == events.LISTENER_JOINED:
                    events.listener_joined()
                else:
                    self._woke(data)
            elif kind == "subscribe":
                if self._failures:
                    logger.info("worker_id=%s wake subscription back; sweeping every partition once",
                                self.worker_id)
                self.subscribed = True
                self._failures = 0
                self._resubscribed()


async def _close_quietly(pubsub: aioredis.client.PubSub) -> None:
    try:
        await pubsub.aclose()  # type: ignore[no-untyped-call]  # redis-py leaves it unannotated
    except Exception:  # noqa: BLE001 - closing a connection that already failed
        pass
