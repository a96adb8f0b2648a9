"""The benchmark's no-op task for dtq: one Redis round trip (INCR of the counter named in the payload).

Registered with DTQ_TASK_MODULES=bench.tasks. Every peer in bench/peers runs the same body.
DTQ_BENCH_BODY=sync registers it as a plain `def` instead (what Django code is): a blocking INCR
on a module-level redis-py client, the body the peers' thread workers run.
"""

from __future__ import annotations

import os
from typing import Any

import redis
import redis.asyncio as aioredis

from dtq_core.conf import get_config
from dtq_core.connection import async_client
from dtq_tasks import task

_client: aioredis.Redis | None = None


def _redis() -> aioredis.Redis:
    # One client per worker process, made on first use inside the worker's event loop.
    global _client
    if _client is None:
        # redis-py's default pool refuses (MaxConnectionsError) past its cap, so the cap is set
        # well above any --concurrency the bench uses; connections are only opened on demand.
        # No socket timeout, as in redis-py < 8 (arq's and SAQ's): redis-py 8's default (5 s)
        # runs every write of the asyncio client as a task of its own. taskiq's body does the same.
        config = get_config()
        if config.redis_url.startswith(("redis+", "rediss+")):  # Sentinel or Cluster: dtq's own factory
            _client = async_client(config, read_timeout_s=10.0)
        else:
            _client = aioredis.Redis.from_url(config.redis_url, max_connections=1000, socket_timeout=None)
    return _client


if os.environ.get("DTQ_BENCH_BODY") == "sync":
    # No socket timeout, as the async client's and bench/peers' sync body: with one, every read
    # of a blocking socket polls first (one more system call per round trip).
    _sync = redis.Redis.from_url(get_config().redis_url, max_connections=1000, socket_timeout=None)

    @task("bench.noop")
    def noop(payload: Any) -> None:
        """Count one execution, in a handler thread."""
        _sync.incr(payload["k"])
else:
    @task("bench.noop")
    async def noop(payload: Any) -> None:
        """Count one execution."""
        await _redis().incr(payload["k"])
