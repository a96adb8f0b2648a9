"""Redis clients. Request paths fail fast (short timeouts, no retries) so a Redis that is down
or frozen turns into 503 REDIS_UNAVAILABLE within 2 s, never a hang.

DTQ_REDIS_URL names one Redis, a master behind Sentinel or a Redis Cluster (redis_url.py). With
Sentinel every client's pool asks the sentinels for the master each time it opens a connection,
and drops a connection the old master closes or answers READONLY on (redis-py's
SentinelConnectionPool); and since an open connection would not see a planned failover (the old
master stays up, taking writes it later drops), each process watches the sentinels and drops
its connections to a master they replaced (sentinel_watch.py). wire.py's raw connections come
from the same pools, so they follow it too.
"""

from __future__ import annotations

import socket
from typing import Any, cast

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.asyncio.retry
import redis.cluster
from redis.backoff import NoBackoff
from redis.retry import Retry

from . import sentinel_watch
from .config import ConfigError, DtqConfig
from .redis_url import RedisTarget, Topology, parse, topology_of

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
    write failed), it is at maxmemory (OOM), or fewer replicas than its min-replicas-to-write are
    connected (NOREPLICAS). Nothing was written; transient for the caller, like an outage."""
    if isinstance(exc, redis.exceptions.OutOfMemoryError):  # redis-py strips its "OOM " prefix
        return True
    if not isinstance(exc, redis.exceptions.ResponseError):
        return False
    reply = str(exc).split("caused error: ", 1)[-1].lstrip("('\"")  # a pipeline's wraps Redis's reply
    return reply.startswith(("MISCONF", "NOREPLICAS"))


def never_connected(exc: BaseException) -> bool:
    """redis-py could not open the connection (refused, or a host name that does not resolve):
    the command never left this process. dtq's clients do not retry, so no earlier try of the
    same call can have reached Redis either. A timeout is not one: a read times out the same way."""
    return (isinstance(exc, redis.exceptions.ConnectionError)
            and isinstance(exc.__context__, (ConnectionRefusedError, socket.gaierror)))


def demoted(exc: BaseException) -> bool:
    """A write reached a replica (READONLY): a master demoted by a failover, still reached through
    a connection made before it (or through an address that has not moved to the new master)."""
    return isinstance(exc, redis.exceptions.ReadOnlyError)


def refusal(exc: BaseException) -> str:
    """Redis's own words for a refused write, for the client: without the script's location, nor
    a pipeline's "Command # 1 (<the command and its arguments>) of pipeline caused error: "."""
    text = str(exc).split("caused error: ", 1)[-1].split(" script: ", 1)[0]
    return f"OOM {text}" if isinstance(exc, redis.exceptions.OutOfMemoryError) else text


def wrong_database(exc: BaseException) -> bool:
    """Redis refused the SELECT of the URL's database: a configuration error, found on connect."""
    return isinstance(exc, redis.exceptions.ResponseError) and "DB index is out of range" in str(exc)


def topology(config: DtqConfig) -> Topology:
    """"single", "sentinel" or "cluster": what DTQ_REDIS_URL names."""
    return topology_of(config.redis_url)



def request_timeout_s(config: DtqConfig) -> float:
    """How long a request-path call waits for a reply: DTQ_REDIS_TIMEOUT_S, plus the WAIT that an
    acknowledged write may add with DTQ_REDIS_MIN_REPLICAS (else every WAIT would time out first)."""
    wait_s = config.redis_wait_timeout_ms / 1000 if config.redis_min_replicas else 0.0
    return config.redis_timeout_s + wait_s


def sync_client(config: DtqConfig) -> redis.Redis:
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": request_timeout_s(config),
        "socket_connect_timeout": config.redis_timeout_s,
        "retry": Retry(NoBackoff(), 0),
        "retry_on_error": [],
        "health_check_interval": 0,
        "max_connections": 256,
    }
    target = parse(config.redis_url)
    if target.topology == "sentinel":
        return sentinel_watch.sync_master(target, config, options)
    if target.topology == "cluster":
        # Duck-typed as redis.Redis: the engine uses what both have (keyed commands, pipelines,
        # scripts through dtq_core.scripts, hot-path exchanges through dtq_core.routing).
        return cast(redis.Redis, cluster_client(config))
    return redis.Redis.from_url(config.redis_url, **options)


def async_client(config: DtqConfig, *, read_timeout_s: float) -> aioredis.Redis:
    """A client for the worker; read_timeout_s must exceed its longest blocking read."""
    options: dict[str, Any] = {
        "decode_responses": True,
        "socket_timeout": read_timeout_s,
        "socket_connect_timeout": max(config.redis_timeout_s, 2.0),
        # The asyncio client's own class: redis-py 8.2 converts a blocking one with a UserWarning.
        "retry": redis.asyncio.retry.Retry(NoBackoff(), 0),
        "retry_on_error": [],
        "max_connections": 64,
    }
    target = parse(config.redis_url)
    if target.topology == "sentinel":
        return sentinel_watch.async_master(target, config, options)
    if target.topology == "cluster":
        return cast(aioredis.Redis, async_cluster_client(config, read_timeout_s=read_timeout_s))
    return aioredis.Redis.from_url(config.redis_url, **options)


def cluster_client(config: DtqConfig) -> redis.cluster.RedisCluster:
    """A blocking client for the Redis Cluster a redis+cluster:// URL names (its seed nodes).

    Timeouts as sync_client's; redis-py's own cluster retries are kept, as they are what follows
    MOVED/ASK redirections and a promoted replica.
    """
    target = _cluster_target(config)
    return redis.cluster.RedisCluster(
        startup_nodes=[redis.cluster.ClusterNode(host, port) for host, port in target.nodes],
        decode_responses=True, socket_timeout=request_timeout_s(config),
        socket_connect_timeout=config.redis_timeout_s, username=target.username, password=target.password,
        ssl=target.ssl)


def async_cluster_client(config: DtqConfig, *, read_timeout_s: float) -> aiocluster.RedisCluster:
    """The asyncio counterpart of cluster_client, with the worker's timeouts (see async_client)."""
    target = _cluster_target(config)
    return aiocluster.RedisCluster(
        startup_nodes=[aiocluster.ClusterNode(host, port) for host, port in target.nodes],
        decode_responses=True, socket_timeout=read_timeout_s,
        socket_connect_timeout=max(config.redis_timeout_s, 2.0), username=target.username,
        password=target.password, ssl=target.ssl)


def _cluster_target(config: DtqConfig) -> RedisTarget:
    target = parse(config.redis_url)
    if target.topology != "cluster":
        raise ConfigError(f"DTQ_REDIS_URL is not a redis+cluster:// URL (a {target.topology} Redis)")
    return target


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
