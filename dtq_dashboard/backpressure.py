"""Backpressure from daphne's socket to the live feed, so a stuck client's events wait (bounded,
dropped, counted) in its ClientBuffer instead of piling up in Twisted's unbounded write buffer.

ASGI has no way to say "this client is not reading": daphne's `websocket.send` returns at once
and Twisted buffers whatever the socket cannot take. Twisted itself does know: a push producer
registered on the transport is paused when the write buffer passes its high-water mark (64 KiB)
and resumed when it drains. The middleware below finds daphne's protocol behind the ASGI `send`
and hands the consumer a gate driven by exactly that, and one (InboxGate) that stops reading a
client that sends faster than the consumer handles its frames.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

SCOPE_KEY = "dtq.send_gate"
# daphne queues every frame a client sends for the consumer, without bound, and parses them faster
# than we handle them: past INBOX_HIGH waiting frames it stops reading the client's socket, and
# reads again below INBOX_LOW (a flood of pings then waits in the client's kernel buffers).
INBOX_HIGH = 1000
INBOX_LOW = 100


class SendGate:
    """Open while the client's socket takes data. A Twisted IPushProducer (duck-typed): Twisted
    calls these on the reactor thread, which under daphne is the asyncio loop's thread."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._open = asyncio.Event()
        self._open.set()
        self._registered = False

    def start(self) -> None:
        """Register with the transport (after the handshake); without it the gate stays open."""
        transport = getattr(self._protocol, "transport", None)
        if transport is None:
            return
        try:
            if getattr(transport, "producer", None) is not None:
                # daphne's HTTP channel, left registered from before the upgrade: it handed the
                # transport to the WebSocket protocol and no longer writes to it.
                transport.unregisterProducer()
            transport.registerProducer(self, True)
            self._registered = True
        except Exception:  # noqa: BLE001 - the transport is gone or refuses: no gating
            self._open.set()

    def stop(self) -> None:
        if self._registered:
            self._registered = False
            try:
                self._protocol.transport.unregisterProducer()
            except Exception:  # noqa: BLE001 - the transport is gone already
                pass
        self._open.set()

    def allow_close_time(self, seconds: float) -> None:
        """Give the client this long to read the close frame we are about to send before the
        connection is dropped. autobahn (under daphne) drops it 1 s after sending the close frame,
        which sits behind everything the socket already holds: a client that was slow, not gone,
        would get a reset instead of its close code."""
        if hasattr(self._protocol, "closeHandshakeTimeout"):
            self._protocol.closeHandshakeTimeout = seconds

    def inbox_gate(self) -> InboxGate:
        """The gate for the other direction, on the same daphne protocol."""
        return InboxGate(self._protocol)

    @property
    def is_open(self) -> bool:
        return self._open.is_set()

    async def wait_open(self) -> None:
        await self._open.wait()

    # Twisted's IPushProducer
    def pauseProducing(self) -> None:  # noqa: N802 - Twisted's interface
        self._open.clear()

    def resumeProducing(self) -> None:  # noqa: N802
        self._open.set()

    def stopProducing(self) -> None:  # noqa: N802 - the connection is gone: let the sender finish
        self._open.set()


class InboxGate:
    """Reads a client's frames only as fast as the consumer handles them (see INBOX_HIGH)."""

    def __init__(self, protocol: Any) -> None:
        self._protocol = protocol
        self._paused = False

    def handled_one(self) -> None:
        """Call once per frame handled: pause or resume reading by how many still wait."""
        waiting = self._protocol.application_queue.qsize()
        if not self._paused and waiting > INBOX_HIGH:
            self._paused = True
            self._protocol.transport.pauseProducing()
        elif self._paused and waiting < INBOX_LOW:
            self.resume()

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._protocol.transport.resumeProducing()


def daphne_protocol(send: Any) -> Any | None:
    """daphne passes `partial(server.handle_reply, protocol)` as `send`; anything else (another
    server, Channels' test communicator) has no transport to watch."""
    if isinstance(send, functools.partial) and send.args and hasattr(send.args[0], "registerProducer"):
        return send.args[0]
    return None


class SendBackpressure:
    """ASGI middleware, outermost on the WebSocket stack: it still sees daphne's own `send`."""

    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        protocol = daphne_protocol(send) if scope.get("type") == "websocket" else None
        if protocol is not None:
            scope = {**scope, SCOPE_KEY: SendGate(protocol)}
        return await self.application(scope, receive, send)
