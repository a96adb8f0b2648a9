"""A small asyncio HTTP/1.1 load client: N keep-alive connections, a bounded number of requests."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field


@dataclass
class LoadResult:
    elapsed_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)


async def _read_response(reader: asyncio.StreamReader) -> int:
    status = int((await reader.readline()).split()[1])
    length, chunked = 0, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        name = name.strip().lower()
        if name == "content-length":
            length = int(value)
        elif name == "transfer-encoding" and "chunked" in value.lower():
            chunked = True
    if chunked:
        while True:
            size = int((await reader.readline()).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    elif length:
        await reader.readexactly(length)
    return status


async def _connection(host: str, port: int, request: bytes, budget: list[int], result: LoadResult) -> None:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while budget[0] > 0:
            budget[0] -= 1
            started = time.perf_counter()
            writer.write(request)
            await writer.drain()
            status = await _read_response(reader)
            result.latencies_s.append(time.perf_counter() - started)
            result.statuses[status] += 1
    finally:
        writer.close()


def post_json_request(host: str, port: int, path: str, body: bytes) -> bytes:
    head = (f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: keep-alive\r\n\r\n")
    return head.encode() + body


async def run_load(host: str, port: int, request: bytes, *, total: int, clients: int, timeout_s: float = 120
                   ) -> LoadResult:
    """Send `total` copies of `request` over `clients` keep-alive connections; stop at timeout_s."""
    result = LoadResult()
    budget = [total]
    started = time.perf_counter()
    tasks = [asyncio.create_task(_connection(host, port, request, budget, result)) for _ in range(clients)]
    done, pending = await asyncio.wait(tasks, timeout=timeout_s)
    for task in pending:
        task.cancel()
    for task in done:
        if task.exception() is not None:
            raise task.exception()  # type: ignore[misc]
    result.elapsed_s = time.perf_counter() - started
    return result
