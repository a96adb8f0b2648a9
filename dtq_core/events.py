"""Whether the hot-path scripts publish task events: DTQ_EVENTS and the listener key.

Two commands per event (the partition's sequence INCR and the PUBLISH) were a quarter of the Redis
work of a task, mostly published to nobody. With DTQ_EVENTS=auto (the default) whoever listens
on the events channel through dtq (the console's feed, dtq_dashboard/fanout.py) keeps the listener
key alive (SET PX, refreshed every LISTENER_REFRESH_S), and workers and submitters read it at most
once every CHECK_EVERY_S, then pass the answer to their scripts as an events argument (1/0): a
script's emit is a no-op on 0. "always" and "off" skip the key. Rare operator scripts (cancel,
purge, DLQ retry and discard, the leader's sweeps) always emit.

A listener that starts misses at most about CHECK_EVERY_S of events of processes that had just
read "nobody listens": the console's pages load their state over REST and take events from then on.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .config import DtqConfig
from .keys import Keys

LISTENER_TTL_MS = 10_000  # the key outlives a few missed refreshes of a live listener
LISTENER_REFRESH_S = 2.0
CHECK_EVERY_S = 1.0

# Published on the wake channel by a listener that has just subscribed: workers (which hear that
# channel anyway, dtq_core/worker/wake.py) read the key again at once instead of up to
# CHECK_EVERY_S later, so an operator who opens the console sees the next task's events.
LISTENER_JOINED = "!events"

# Bumped by announce() in this process, so gates of the same process read the key again at once
# (a test that subscribes and then submits sees its events without waiting for the next check).
_generation = 0


def announce(client: Any, keys: Keys, ttl_ms: int = LISTENER_TTL_MS) -> None:
    """Say (blocking client) that someone listens on keys.events() for the next ttl_ms."""
    global _generation
    client.set(keys.events_listener(), "1", px=ttl_ms)
    _generation += 1


def listener_joined() -> None:
    """A listener said it joined (LISTENER_JOINED heard): every gate of this process reads the key
    again at its next use."""
    global _generation
    _generation += 1


async def aannounce(client: Any, keys: Keys, ttl_ms: int = LISTENER_TTL_MS) -> None:
    """announce() for asyncio clients."""
    global _generation
    await client.set(keys.events_listener(), "1", px=ttl_ms)
    _generation += 1


class EventsGate:
    """The events argument (1 = publish, 0 = not) one process passes to its scripts."""

    def __init__(self, config: DtqConfig, keys: Keys, monotonic: Callable[[], float] = time.monotonic) -> None:
        self.mode = config.events
        self.key = keys.events_listener()
        self._monotonic = monotonic
        self._on = self.mode == "always"
        self._checked_at = -1e18
        self._generation = -1

    def _stale(self) -> bool:
        return self.mode == "auto" and (self._generation != _generation
                                        or self._monotonic() - self._checked_at >= CHECK_EVERY_S)

    def _store(self, exists: Any) -> int:
        self._on = bool(exists)
        self._checked_at, self._generation = self._monotonic(), _generation
        return int(self._on)

    def flag(self, client: Any) -> int:
        """1 or 0, reading the listener key (blocking client) when the last read is stale. A read
        that fails keeps the last answer until the next check: it never fails a submit or a batch
        (their own call reports Redis trouble)."""
        if not self._stale():
            return int(self._on)
        try:
            return self._store(client.exists(self.key))
        except Exception:  # noqa: BLE001 - see above
            return self._store(self._on)

    async def aflag(self, client: Any) -> int:
        """flag() for asyncio clients."""
        if not self._stale():
            return int(self._on)
        try:
            return self._store(await client.exists(self.key))
        except Exception:  # noqa: BLE001 - see flag()
            return self._store(self._on)
