"""One Redis pub/sub subscription per server process, fanned out to every connected browser.

Each client gets a bounded buffer. When a slow client's buffer is full, non-terminal events
are dropped and counted (in this process and in the cluster-wide `events_dropped` counter);
terminal events are never dropped: one evicts the oldest buffered non-terminal event instead.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import weakref
from collections import deque
from typing import Any

from redis.utils import HIREDIS_AVAILABLE

from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.events import LISTENER_JOINED, LISTENER_REFRESH_S, aannounce
from dtq_core.keys import Keys
from dtq_core.task import TERMINAL

logger = logging.getLogger(__name__)

BUFFER_SIZE = 1000
# Terminal events are never dropped, so a client that never reads could grow without bound;
# past this many buffered terminal events it is disconnected and re-derives state over REST.
TERMINAL_OVERFLOW = 10 * BUFFER_SIZE
DROP_FLUSH_S = 1.0  # the cluster-wide drop counter is written at most this often (batched HINCRBY)
# Anyone who can PUBLISH can flood the channel with junk: say so in the log, but not per message.
MALFORMED_LOG_EVERY_S = 60.0
TERMINAL_STATUSES = frozenset(s.value for s in TERMINAL)
DISCONNECTED: dict[str, str] = {"type": "feed.status", "state": "disconnected"}
PONG = json.dumps({"type": "feed.pong"})


def is_terminal(event: Any) -> bool:
    """Terminal events are the task.* ones with a terminal status (CONTRACT section 8)."""
    if not isinstance(event, dict):
        return False
    etype, status = event.get("type"), event.get("status")
    # Anything may arrive on the channel: a list as status must not raise (unhashable) here.
    return (isinstance(etype, str) and etype.startswith("task.")
            and isinstance(status, str) and status in TERMINAL_STATUSES)


def parse_event(raw: str | bytes) -> tuple[str, bool] | None:
    """Return the event's text and whether it is terminal, or None when it is no event: not UTF-8
    or JSON, or not an object whose type is a string and whose status is a string or null."""
    try:
        text = raw.decode() if isinstance(raw, bytes) else raw
        event = json.loads(text)
    except (ValueError, RecursionError):  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None
    if not (isinstance(event, dict) and isinstance(event.get("type"), str)
            and isinstance(event.get("status"), str | None)):
        return None  # pages would trip over it: an event's fields are what they read
    return text, is_terminal(event)


class ClientBuffer:
    """The per-client queue between the hub (producer) and one consumer's sender (consumer).

    Non-terminal and terminal events wait in two queues, numbered in arrival order, so dropping
    the oldest non-terminal event is O(1) however many terminal ones a stuck client piles up.
    """

    def __init__(self, size: int = BUFFER_SIZE, overflow: int = TERMINAL_OVERFLOW) -> None:
        self.size = size
        self.overflow = overflow
        self._plain: deque[tuple[int, str]] = deque()
        self._terminal: deque[tuple[int, str]] = deque()
        self._seq = 0
        self._pong_due = False
        self.dropped = 0  # events this client never got
        self.overflowed = asyncio.Event()  # past the terminal cap: the client is to be closed
        self._ready = asyncio.Event()

    def __len__(self) -> int:
        return len(self._plain) + len(self._terminal)

    def offer(self, text: str, *, terminal: bool) -> int:
        """Buffer one event; return how many events were dropped to do so (0 or 1)."""
        if self.overflowed.is_set():
            # The client is being closed (it re-derives state over REST): buffer nothing more.
            if terminal:
                return 0
            self.dropped += 1
            return 1
        if len(self) < self.size:
            self._push(terminal, text)
            return 0
        if not terminal:
            self.dropped += 1
            return 1
        if self._plain:
            self._plain.popleft()  # the oldest non-terminal event makes room
            self.dropped += 1
            self._push(terminal, text)
            return 1
        self._push(terminal, text)  # only terminal events are buffered: keep this one too
        if len(self) > self.overflow:
            self.overflowed.set()
            self._ready.set()  # wake the sender: it closes the connection
        return 0

    def request_pong(self) -> bool:
        """Have the sender answer a ping; False while a pong already waits (the ping is dropped),
        so a client that pings and never reads costs one pending pong, not one per ping."""
        if self._pong_due:
            return False
        self._pong_due = True
        self._ready.set()
        return True

    def _push(self, terminal: bool, text: str) -> None:
        self._seq += 1
        (self._terminal if terminal else self._plain).append((self._seq, text))
        self._ready.set()

    async def take(self, limit: int | None = None) -> list[str]:
        """Wait for events, then hand over the oldest `limit` (default: all) of them, in arrival
        order, after a pending pong; nothing once the buffer has overflowed (its client is to be
        closed)."""
        while not len(self) and not self._pong_due and not self.overflowed.is_set():
            self._ready.clear()
            await self._ready.wait()
        if self.overflowed.is_set():
            return []
        plain, terminal = self._plain, self._terminal
        batch = [PONG] if self._pong_due else []
        self._pong_due = False
        for _ in range(len(self) if limit is None else min(limit, len(self))):
            if plain and (not terminal or plain[0][0] < terminal[0][0]):
                batch.append(plain.popleft()[1])
            else:
                batch.append(terminal.popleft()[1])
        return batch


class EventHub:
    """Owns the process's single subscription to the events channel; started by the first client."""

    def __init__(self, config: DtqConfig) -> None:
        self.config = config
        self.keys = Keys(config.key_prefix)
        self.clients: set[ClientBuffer] = set()
        self.received_total = 0  # events read from Redis by this process
        self.dropped_total = 0  # process-wide count of dropped events
        self.subscribed = asyncio.Event()
        self.in_trouble = asyncio.Event()  # the last attempt to subscribe failed (Redis unreachable)
        self._pending_drops = 0
        self.malformed_total = 0  # messages on the channel that were no event (skipped)
        self._malformed_logged_at: float | None = None
        self._task: asyncio.Task[None] | None = None

    def register(self, client: ClientBuffer | None = None) -> ClientBuffer:
        client = client or ClientBuffer()
        self.clients.add(client)
        if self._task is None or self._task.done():
            # A new subscription: what the last one said (live, or Redis unreachable) holds no more.
            self.subscribed.clear()
            self.in_trouble.clear()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="dtq-events-subscription")
        elif self.in_trouble.is_set():
            # The hub said "disconnected" before this client came: it would show "live" while
            # nothing can arrive. (It hears feed.resync with the others once Redis is back.)
            client.offer(json.dumps(DISCONNECTED), terminal=True)
        return client

    async def ready(self, timeout: float) -> None:
        """Return once the subscription is live, or Redis is known to be unreachable (the hub's
        feed.status is then in the client's buffer), or after `timeout` seconds.

        A page that hears "open" before the subscription exists would show "live" and re-read state
        over REST while events still go nowhere: whatever moved in between would never reach it."""
        waits = [asyncio.ensure_future(self.subscribed.wait()), asyncio.ensure_future(self.in_trouble.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()

    async def unregister(self, client: ClientBuffer) -> None:
        self.clients.discard(client)
        if not self.clients and self._task is not None:
            # Nobody listens: drop the subscription; the next client starts a new one.
            task, self._task = self._task, None
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def dispatch(self, raw: str | bytes) -> None:
        """Hand one published event to every client buffer, counting what slow clients drop;
        a message that is no event is skipped."""
        parsed = parse_event(raw)
        if parsed is None:
            self._skip_malformed("not a JSON event")
            return
        text, terminal = parsed
        self.received_total += 1
        dropped = sum(client.offer(text, terminal=terminal) for client in list(self.clients))
        if dropped:
            self.dropped_total += dropped
            self._pending_drops += dropped

    def _skip_malformed(self, why: object) -> None:
        self.malformed_total += 1
        now = time.monotonic()
        if self._malformed_logged_at is None or now - self._malformed_logged_at >= MALFORMED_LOG_EVERY_S:
            self._malformed_logged_at = now
            logger.warning("skipping a message on the events channel that is no event (%s); "
                           "%d skipped so far, logged at most every %.0f s",
                           why, self.malformed_total, MALFORMED_LOG_EVERY_S)

    def _dispatch_one(self, raw: str | bytes) -> None:
        """Dispatch, whatever the message: a bug it trips must cost that message, not the
        subscription (the catch-all in _run would take it for Redis trouble and resubscribe,
        losing what is published meanwhile)."""
        try:
            self.dispatch(raw)
        except Exception as exc:  # noqa: BLE001 - one message's problem; the feed goes on
            self._skip_malformed(repr(exc))

    def broadcast_control(self, message: dict[str, Any]) -> None:
        """Send a feed.* control message (never dropped) to every client."""
        text = json.dumps(message)
        for client in list(self.clients):
            client.offer(text, terminal=True)

    async def _run(self) -> None:
        backoff = 0.25
        failed = False
        loop = asyncio.get_running_loop()
        while True:
            client = async_client(self.config, read_timeout_s=5.0)
            pubsub = client.pubsub()
            try:
                # With DTQ_EVENTS=auto, workers and submitters publish only while this key lives:
                # set before subscribing, so whoever sees the subscription sees the key too.
                await aannounce(client, self.keys)
                await pubsub.subscribe(self.keys.events())
                await client.publish(self.keys.wake(), LISTENER_JOINED)  # workers read the key again now
                next_announce = loop.time() + LISTENER_REFRESH_S
                self.in_trouble.clear()
                self.subscribed.set()
                if failed:
                    # Events published while we were away are gone: tell pages to re-derive state.
                    self.broadcast_control({"type": "feed.resync", "reason": "subscription restored"})
                    failed, backoff = False, 0.25
                next_flush = loop.time() + DROP_FLUSH_S
                while True:
                    message = await self._next_message(pubsub)
                    if message is not None and message.get("type") == "message":
                        self._dispatch_one(message["data"])
                    if loop.time() >= next_announce:
                        await aannounce(client, self.keys)
                        next_announce = loop.time() + LISTENER_REFRESH_S
                    if self._pending_drops and loop.time() >= next_flush:
                        await self._flush_drops(client)
                        next_flush = loop.time() + DROP_FLUSH_S
            except asyncio.CancelledError:
                await self._flush_drops(client, quiet=True)
                raise
            except Exception as exc:  # noqa: BLE001 - any Redis trouble: log, back off, subscribe again
                self.subscribed.clear()
                self.in_trouble.set()
                if not failed:
                    logger.warning("events subscription lost: %s; retrying", exc)
                    self.broadcast_control(DISCONNECTED)
                failed = True
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            finally:
                await _close(pubsub, client)

    async def _next_message(self, pubsub: Any) -> Any:
        """The next published message, or None. One that is not UTF-8 raises in redis-py's
        decoding, which hiredis does after taking the whole message off the connection: it is
        skipped here, not taken for Redis trouble. (redis-py's own parser would raise on it again
        and again: without hiredis, it is left to _run, which subscribes anew.)"""
        try:
            return await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        except UnicodeDecodeError as exc:
            if not HIREDIS_AVAILABLE:
                raise
            self._skip_malformed(f"not UTF-8: {exc}")
            return None

    async def _flush_drops(self, client: Any, *, quiet: bool = False) -> None:
        count, self._pending_drops = self._pending_drops, 0
        if not count:
            return
        try:
            await client.hincrby(self.keys.global_stats_counters(), "events_dropped", count)
        except Exception as exc:  # noqa: BLE001 - best effort; kept for the next flush
            self._pending_drops += count
            if not quiet:
                logger.warning("could not record %d dropped events: %s", count, exc)


async def _close(pubsub: Any, client: Any) -> None:
    for closer in (pubsub.aclose, client.aclose):
        try:
            await closer()
        except Exception:  # noqa: BLE001 - closing a broken connection may fail; nothing to recover
            pass


_hubs: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, EventHub] = weakref.WeakKeyDictionary()


def get_hub() -> EventHub:
    """The hub of the running event loop (daphne runs one loop per process, so one per process)."""
    loop = asyncio.get_running_loop()
    hub = _hubs.get(loop)
    if hub is None:
        from dtq_core.conf import get_config

        hub = _hubs[loop] = EventHub(get_config())
    return hub
