"""The worker's asyncio Redis client gets redis-py's asyncio Retry class: given the blocking one,
redis-py 8.2 (what `pip install dtq` resolves) converts it with a UserWarning on every worker start,
a line that is not JSON under DTQ_LOG_FORMAT=json.
"""

from __future__ import annotations

import redis.asyncio.retry

from dtq_core.config import DtqConfig
from dtq_core.connection import async_client


def test_the_asyncio_client_gets_the_asyncio_retry_class() -> None:
    client = async_client(DtqConfig(redis_url="redis://127.0.0.1:1/0"), read_timeout_s=1.0)
    retry = client.connection_pool.connection_kwargs["retry"]
    assert isinstance(retry, redis.asyncio.retry.Retry), type(retry)
