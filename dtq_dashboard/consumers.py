"""The /ws/events consumer: authorise with the console's read policy, then forward hub events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable

from channels.generic.websocket import AsyncWebsocketConsumer

from .backpressure import SCOPE_KEY, SendGate
from .fanout import ClientBuffer, get_hub
from .permissions import can_view_console

CLOSE_FORBIDDEN = 4403
CLOSE_TOO_SLOW = 4008
# How long a client closed for being too slow has to read its 4008 (behind up to a few MB its
# socket already holds) before the connection is dropped; the socket is all it costs meanwhile.
TOO_SLOW_CLOSE_TIME_S = 10.0
SEND_CHUNK = 32  # events written per look at the socket: at most this many land past its high-water mark
# The handshake waits at most this long for the process's subscription (daphne's own handshake
# timeout is 5 s): the page's "live" and its REST re-read then come after events reach it.
SUBSCRIBE_WAIT_S = 3.0


class NoRouteConsumer(AsyncWebsocketConsumer):
    """Any other WebSocket path: the handshake is refused (daphne answers 403), where Channels'
    router would raise and daphne answer 500 with a traceback in the log."""

    async def connect(self) -> None:
        await self.close()


class EventsConsumer(AsyncWebsocketConsumer):
    buffer: ClientBuffer | None = None
    pump: asyncio.Task[None] | None = None
    gate: SendGate | None = None

    async def connect(self) -> None:
        if not can_view_console(self.scope.get("user")):
            await self.close(code=CLOSE_FORBIDDEN)
            return
        # Registered before the subscription exists, so nothing published after it is missed.
        self.hub = get_hub()
        self.buffer = self.hub.register()
        await self.hub.ready(SUBSCRIBE_WAIT_S)
        await self.accept()
        # Under daphne: open while the client's socket takes data (see backpressure.py).
        self.gate = self.scope.get(SCOPE_KEY)
        if self.gate is not None:
            self.gate.start()
        self.pump = asyncio.get_running_loop().create_task(self._pump())

    async def disconnect(self, code: int) -> None:
        if self.pump is not None:
            self.pump.cancel()
        if self.gate is not None:
            self.gate.stop()
        if self.buffer is not None:
            await self.hub.unregister(self.buffer)
            self.buffer = None

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        """The feed is one-way; a client's "ping" gets a "pong" so pages can check liveness."""
        if text_data == "ping":
            await self.send(text_data=json.dumps({"type": "feed.pong"}))

    async def _pump(self) -> None:
        assert self.buffer is not None
        buffer, reported = self.buffer, 0
        while True:
            if self.gate is not None and not self.gate.is_open:
                # The client's socket is full: events wait in its bounded buffer (where a slow
                # client's drops happen) until it reads again or piles up too many to keep.
                await _either(self.gate.wait_open(), buffer.overflowed.wait())
            batch = await buffer.take(SEND_CHUNK)
            if buffer.overflowed.is_set():
                if self.gate is not None:
                    self.gate.allow_close_time(TOO_SLOW_CLOSE_TIME_S)
                await self.close(code=CLOSE_TOO_SLOW)
                return
            if buffer.dropped != reported:
                # Tell the page it missed events, so it re-reads counts over REST.
                await self.send(text_data=json.dumps({"type": "feed.dropped", "count": buffer.dropped - reported}))
                reported = buffer.dropped
            for text in batch:
                await self.send(text_data=text)


async def _either(*waits: Awaitable[object]) -> None:
    """Return when any of the waits finishes; the others are cancelled."""
    tasks = [asyncio.ensure_future(w) for w in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
