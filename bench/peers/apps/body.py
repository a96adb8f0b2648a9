"""The one task body every system runs, in its two kinds: one INCR of the counter named by `key`.

Every system's task calls these functions, so the client and its settings are the same for all:
redis-py, made on first use in the process (the async one in the loop that first awaits it),
no socket timeout (redis-py 8's default of 5 s makes the asyncio client run each write as a
task of its own: a cost of the client, so nobody pays it), a connection cap far above any
concurrency the benchmark runs. The installed redis-py differs by virtualenv (dtq's .venv and
bench-peers-venv: 8.1; bench-peers-venv-redis5, arq and SAQ: 5.3), as each library pins it.

PAD is the task's second argument when a run asks for payloads of a realistic size
(`python -m bench.peers --payload-bytes N`, BENCH_PAYLOAD_BYTES): every system sends it with each
task, stores it, reads it back and hands it to the task, which ignores it. The same N characters
for everyone (letters and digits, so no system's encoding escapes or shortens them); "" when the
run does not ask, and then no system sends a second argument at all.
"""

from __future__ import annotations

import os
import random
import string
import threading

import redis
import redis.asyncio as aioredis

MAX_CONNECTIONS = 1000

_sync: redis.Redis | None = None
_async: aioredis.Redis | None = None
_lock = threading.Lock()


def payload_pad(size: int) -> str:
    """size characters, the same in every process (a fixed seed)."""
    return "".join(random.Random(size).choices(string.ascii_letters + string.digits, k=size))


PAD = payload_pad(int(os.environ.get("BENCH_PAYLOAD_BYTES", "0") or 0))
PAD_ARGS: tuple[str, ...] = (PAD,) if PAD else ()  # what a send appends to its arguments


def _url() -> str:
    return os.environ["BENCH_REDIS_URL"]


def incr_sync(key: str, pad: str = "") -> None:
    """The SYNC body: one blocking INCR (sync handlers may run in several threads: one pool)."""
    global _sync
    if _sync is None:
        with _lock:
            if _sync is None:
                _sync = redis.Redis.from_url(_url(), socket_timeout=None, max_connections=MAX_CONNECTIONS)
    _sync.incr(key)


async def incr_async(key: str, pad: str = "") -> None:
    """The ASYNC body: one awaited INCR."""
    global _async
    if _async is None:
        _async = aioredis.Redis.from_url(_url(), socket_timeout=None, max_connections=MAX_CONNECTIONS)
    await _async.incr(key)
