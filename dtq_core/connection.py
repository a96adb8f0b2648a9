"""Redis clients. Request paths fail fast (short timeouts, no retries) so a Redis that is down
or frozen turns into 503 REDIS_UNAVAILABLE within 2 s, never a hang."""

from __future__ import annotations

import redis
import redis.asyncio as aioredis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .config import DtqConfig

# Every error that means "Redis is not answering" rather than "the command was wrong".
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,
    redis.exceptions.TimeoutError,
    redis.exceptions.BusyLoadingError,
    ConnectionError,
    TimeoutError,
    OSError,
)

# What a handler may raise that retries as a Redis connection error (failure-modes.md): redis-py's
# own errors only. A builtin OSError (FileNotFoundError, PermissionError, a refused connection to
# some other service) is the handler's failure, permanent like any other exception.
REDIS_CONNECTION_ERRORS: tuple[type[BaseException], ...] = (
    redis.exceptions.ConnectionError,  # BusyLoadingError included
    redis.exceptions.TimeoutError,
)

WRONG_DATABASE = "DTQ_REDIS_URL names a database this Redis does not have (DB index is out of range)"


def wrong_database(exc: BaseException) -> bool:
    """Redis refused the SELECT of the URL's database: a configuration error, found on connect."""
    return isinstance(exc, redis.exceptions.ResponseError) and "DB index is out of range" in str(exc)


def sync_client(config: DtqConfig) -> redis.Redis:
    return redis.Redis.from_url(
        config.redis_url,
        decode_responses=True,
        socket_timeout=config.redis_timeout_s,
        socket_connect_timeout=config.redis_timeout_s,
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        health_check_interval=0,
        max_connections=256,
    )


def async_client(config: DtqConfig, *, read_timeout_s: float) -> aioredis.Redis:
    """A client for the worker; read_timeout_s must exceed its longest blocking read."""
    return aioredis.Redis.from_url(
        config.redis_url,
        decode_responses=True,
        socket_timeout=read_timeout_s,
        socket_connect_timeout=max(config.redis_timeout_s, 2.0),
        retry=Retry(NoBackoff(), 0),
        retry_on_error=[],
        max_connections=64,
    )
