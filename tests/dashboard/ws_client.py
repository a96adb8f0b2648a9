"""A bare WebSocket client over a plain socket, for tests that must control when the client reads.

Real clients (browsers, websockets) read as fast as they can; a stuck one is modelled here by a
socket with a small receive buffer that the test simply does not read for a while.
"""

from __future__ import annotations

import base64
import os
import socket
import struct
from dataclasses import dataclass


@dataclass
class Frame:
    opcode: int
    data: bytes

    @property
    def close_code(self) -> int | None:
        return struct.unpack("!H", self.data[:2])[0] if self.opcode == 8 and len(self.data) >= 2 else None


class RawWebSocket:
    def __init__(self, host: str, port: int, path: str, *, recv_buffer: int | None = None,
                 timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if recv_buffer is not None:
            # Set before connect, so the TCP window is small from the start.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, recv_buffer)
        self.sock.settimeout(timeout)
        self.sock.connect((host, port))
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
                           f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                           "Sec-WebSocket-Version: 13\r\n\r\n").encode())
        self._buf = b""
        head = self._read_until(b"\r\n\r\n")
        self.status = int(head.split(b" ", 2)[1])

    def _read_until(self, marker: bytes) -> bytes:
        while marker not in self._buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("closed during the handshake")
            self._buf += chunk
        head, _, self._buf = self._buf.partition(marker)
        return head

    def _read_exactly(self, n: int) -> bytes:
        while len(self._buf) < n:
            chunk = self.sock.recv(max(65536, n - len(self._buf)))
            if not chunk:
                raise ConnectionError("connection closed")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def recv_frame(self) -> Frame:
        b1, b2 = self._read_exactly(2)
        length = b2 & 0x7F
        if length == 126:
            (length,) = struct.unpack("!H", self._read_exactly(2))
        elif length == 127:
            (length,) = struct.unpack("!Q", self._read_exactly(8))
        mask = self._read_exactly(4) if b2 & 0x80 else None
        data = self._read_exactly(length)
        if mask:
            data = bytes(c ^ mask[i % 4] for i, c in enumerate(data))
        return Frame(b1 & 0x0F, data)

    def send_text(self, text: str) -> None:
        data, mask = text.encode(), os.urandom(4)
        header = bytes([0x81, 0x80 | len(data)]) if len(data) < 126 else \
            bytes([0x81, 0x80 | 126]) + struct.pack("!H", len(data))
        self.sock.sendall(header + mask + bytes(c ^ mask[i % 4] for i, c in enumerate(data)))

    def close(self) -> None:
        self.sock.close()
