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


def write_refused(exc: BaseException) -> bool:
    """Redis answers but refuses writes: its disk is full or failing (MISCONF: the AOF or RDB
    write failed) or it is at maxmemory (OOM). Transient for the caller, like an outage."""
    if isinstance(exc, redis.exceptions.OutOfMemoryError):  # redis-py strips its "OOM " prefix
        return True
    if not isinstance(exc, redis.exceptions.ResponseError):
        return False
    reply = str(exc).split("caused error: ", 1)[-1].lstrip("('\"")  # a pipeline's wraps Redis's reply
    return reply.startswith("MISCONF")


def refusal(exc: BaseException) -> str:
    """Redis's own words for a refused write, for the client: without the script's location, nor
    a pipeline's "Command # 1 (<the command and its arguments>) of pipeline caused error: "."""
    text = str(exc).split("caused error: ", 1)[-1].split(" script: ", 1)[0]
    return f"OOM {text}" if isinstance(exc, redis.exceptions.OutOfMemoryError) else text


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


# -- maxmemory-policy ---------------------------------------------------------------------------
# docs/deployment.md: an evicted task hash, stream or lock is a task lost without a word, so Redis
# must refuse writes when full (noeviction) rather than drop keys. Checked where dtq connects:
# worker start (ERROR line), /ready (a warning in the body) and `manage.py check --deploy`.
NOEVICTION = "noeviction"
EVICTION_POLICY = "REDIS_EVICTION_POLICY"


def eviction_policy(client: redis.Redis) -> str | None:
    """Redis's maxmemory-policy, or None when it cannot be read.

    Managed Redis often disables or renames CONFIG (or an ACL forbids it): INFO memory carries
    the same value as maxmemory_policy. Connection errors propagate.
    """
    try:
        value = client.config_get("maxmemory-policy").get("maxmemory-policy")
        if value:
            return str(value)
    except redis.exceptions.ResponseError:  # unknown command, or NOPERM
        pass
    try:
        return str(client.info("memory").get("maxmemory_policy") or "") or None
    except redis.exceptions.ResponseError:
        return None


async def eviction_policy_async(client: aioredis.Redis) -> str | None:
    """eviction_policy for the worker's asyncio client."""
    try:
        value = (await client.config_get("maxmemory-policy")).get("maxmemory-policy")
        if value:
            return str(value)
    except redis.exceptions.ResponseError:
        pass
    try:
        return str((await client.info("memory")).get("maxmemory_policy") or "") or None
    except redis.exceptions.ResponseError:
        return None


def eviction_problem(policy: str | None) -> str | None:
    """What is wrong with a maxmemory-policy, in one line; None when it is noeviction."""
    if policy == NOEVICTION:
        return None
    if policy is None:
        return ("could not verify Redis's maxmemory-policy (CONFIG GET and INFO memory were both refused); "
                "it must be noeviction, or a full Redis evicts task records, streams and locks: tasks lost "
                "without a trace")
    return (f"Redis's maxmemory-policy is {policy}, not noeviction: a full Redis evicts keys, and an evicted "
            "task record, stream or lock is a task lost without a trace; set maxmemory-policy noeviction "
            "(docs/deployment.md)")
