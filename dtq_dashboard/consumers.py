"""The /ws/events consumer: authorise with the console's read policy, then forward hub events."""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable
from importlib import import_module
from typing import Any

from channels.auth import get_user
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from .backpressure import SCOPE_KEY, InboxGate, SendGate
from .fanout import ClientBuffer, get_hub
from .permissions import can_view_console, login_required_to_read

logger = logging.getLogger(__name__)

CLOSE_FORBIDDEN = 4403
CLOSE_TOO_SLOW = 4008
CLOSE_CHECK_FAILED = 4011  # 1011 "internal error" in the range daphne (autobahn) sends: the page reconnects
# How long a client closed for being too slow has to read its 4008 (behind up to a few MB its
# socket already holds) before the connection is dropped; the socket is all it costs meanwhile.
TOO_SLOW_CLOSE_TIME_S = 10.0
SEND_CHUNK = 32  # events written per look at the socket: at most this many land past its high-water mark
# The handshake waits at most this long for the process's subscription (daphne's own handshake
# timeout is 5 s): the page's "live" and its REST re-read then come after events reach it.
SUBSCRIBE_WAIT_S = 3.0
# With DTQ_CONSOLE_LOGIN_REQUIRED the handshake's "yes" does not last: a logout or a deactivated
# account must end the feed too. Events go out only on a check of the session and user at most
# ACCESS_FRESH_S old (a busy feed costs a page at most one check a second), and a quiet socket is
# checked every ACCESS_IDLE_RECHECK_S, so it is closed (4403) even when nothing is sent.
ACCESS_FRESH_S = 1.0
ACCESS_IDLE_RECHECK_S = 5.0


class NoRouteConsumer(AsyncWebsocketConsumer):
    """Any other WebSocket path: the handshake is refused (daphne answers 403), where Channels'
    router would raise and daphne answer 500 with a traceback in the log."""

    async def connect(self) -> None:
        await self.close()


async def still_allowed(scope: dict[str, Any]) -> bool:
    """Read the policy's answer again from the database: the session (gone after a logout, or
    expired) and its user (deactivated, or a changed password), as a page request would."""
    if not login_required_to_read():
        return True
    session = scope.get("session")
    session_key = getattr(session, "session_key", None)
    if session_key is None:
        return can_view_console(scope.get("user"))  # no session to read again: the handshake's user
    fresh = import_module(settings.SESSION_ENGINE).SessionStore(session_key)
    return can_view_console(await get_user({"session": fresh}))  # channels' own check, in a thread


class EventsConsumer(AsyncWebsocketConsumer):
    buffer: ClientBuffer | None = None
    pump: asyncio.Task[None] | None = None
    gate: SendGate | None = None
    inbox: InboxGate | None = None
    recheck_access = False
    # Event-loop time of the last check that said yes. Not the handshake's: that one was read
    # before the wait for the subscription (up to SUBSCRIBE_WAIT_S), so the first send checks.
    access_checked_at = -math.inf

    async def connect(self) -> None:
        if not can_view_console(self.scope.get("user")):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.recheck_access = login_required_to_read()
        # Registered before the subscription exists, so nothing published after it is missed.
        self.hub = get_hub()
        self.buffer = self.hub.register()
        await self.hub.ready(SUBSCRIBE_WAIT_S)
        await self.accept()
        # Under daphne: open while the client's socket takes data (see backpressure.py).
        self.gate = self.scope.get(SCOPE_KEY)
        if self.gate is not None:
            self.gate.start()
            self.inbox = self.gate.inbox_gate()
        self.pump = asyncio.get_running_loop().create_task(self._pump())

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
        if self.gate is not None:
            self.gate.stop()
        if self.inbox is not None:
            self.inbox.resume()
        if self.buffer is not None:
            await self.hub.unregister(self.buffer)
            self.buffer = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The feed is one-way; a client's "ping" gets a "pong" so pages can check liveness.

        The pong goes out through the sender, like events, once the socket takes data: sent from
        here, daphne would hold one for every ping of a client that pings and never reads."""
        if self.inbox is not None:
            self.inbox.handled_one()
        if text_data == "ping" and self.buffer is not None:
            self.buffer.request_pong()  # False: one is already waiting, and this ping is dropped

    async def _pump(self) -> None:
        assert self.buffer is not None
        buffer, reported = self.buffer, 0
        while True:
            batch = await self._next_batch(buffer)
            if buffer.overflowed.is_set():
                if self.gate is not None:
                    self.gate.allow_close_time(TOO_SLOW_CLOSE_TIME_S)
                await self.close(code=CLOSE_TOO_SLOW)
                return
            lost = await self._access_lost()
            if lost is not None:
                await self.close(code=lost)
                return
            if buffer.dropped != reported:
                # Tell the page it missed events, so it re-reads counts over REST.
                await self.send(text_data=json.dumps({"type": "feed.dropped", "count": buffer.dropped - reported}))
                reported = buffer.dropped
            for text in batch:
                await self.send(text_data=text)

    async def _next_batch(self, buffer: ClientBuffer) -> list[str]:
        """The next events (and pong) to send, once the socket takes data; [] after
        ACCESS_IDLE_RECHECK_S without any, when access is to be checked again."""
        try:
            async with asyncio.timeout(ACCESS_IDLE_RECHECK_S if self.recheck_access else None):
                if self.gate is not None and not self.gate.is_open:
                    # The client's socket is full: events wait in its bounded buffer (where a slow
                    # client's drops happen) until it reads again or piles up too many to keep.
                    await _either(self.gate.wait_open(), buffer.overflowed.wait())
                return await buffer.take(SEND_CHUNK)
        except TimeoutError:
            return []  # nothing taken: cancelled while waiting, the events stay in the buffer

    async def _access_lost(self) -> int | None:
        """None while the user may still read, else the close code. The database is asked again
        once the last "yes" is ACCESS_FRESH_S old, so nothing is sent on an older one."""
        if not self.recheck_access:
            return None
        started = asyncio.get_running_loop().time()
        if started - self.access_checked_at < ACCESS_FRESH_S:
            return None
        try:
            allowed = await still_allowed(self.scope)
        except Exception as exc:  # noqa: BLE001 - e.g. the database is down: send nothing unchecked
            logger.warning("could not check a feed client's access: %s; closing its socket", exc)
            return CLOSE_CHECK_FAILED  # not 4403: the page reconnects (backoff) and is checked anew
        if not allowed:
            return CLOSE_FORBIDDEN
        self.access_checked_at = started  # what the check read is as old as its start
        return None


async def _either(*waits: Awaitable[object]) -> None:
    """Return when any of the waits finishes; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
