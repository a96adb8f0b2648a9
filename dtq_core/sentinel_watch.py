"""Following the master behind Sentinel (DTQ_REDIS_URL=redis+sentinel://...).

redis-py asks the sentinels for the master only when it opens a connection, and dtq keeps its
connections open (pools, wire.py's kept connections and Lines). After `SENTINEL FAILOVER` the old
master stays up and takes writes until the sentinels turn it into a replica (about 10 s: their
INFO period), when it drops them all: connections that stayed on it lost every acknowledged
write of those seconds. So, as Jedis and ioredis do, each process watches the sentinels:

1. One MasterWatch per process and service (sentinels and service name), started with the first
   client, keeps a daemon thread subscribed on one sentinel to `+switch-master` (a sentinel
   adopting a new master) and `+promoted-slave` (the sentinel leading a failover seeing its
   replica promoted: it announces the switch itself only once the other replicas follow). On
   every (re)subscription, and on every such message, it asks that sentinel for the master
   (`SENTINEL MASTER`, `SENTINEL GET-MASTER-ADDR-BY-NAME`): a switch made while it was not
   subscribed is found then. A sentinel silent past a PING is left for the next one.
2. When the master's address changes, every connection to the old one is dropped before its next
   command: the blocking pools' idle connections are closed and the sockets of those in use
   (including wire.py's kept ones) shut down, so their owner's next read or write fails and it
   reconnects (closing them from this thread would change a connection under its owner); the
   asyncio pools' connections are closed on their own event loop; a wire.Line compares
   `generation` before each exchange. An exchange under way on the old master completes or fails.
3. Finding the master when connecting (discover_master) asks the sentinels in turn, each for its
   share of DTQ_REDIS_TIMEOUT_S, and skips a sentinel whose answer is older (a lower config
   epoch) than the master this process knows: during a failover some sentinels still name the old
   master for a while. A connection made while the master moved is sent to the new one.

Only the Sentinel topology gets any of this: one Redis and a Cluster have no thread and no watch.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
import time
import weakref
from collections.abc import Generator
from typing import Any, cast

import redis
import redis.asyncio as aioredis
import redis.asyncio.retry as aioretry
import redis.asyncio.sentinel as aiosentinel
import redis.connection
import redis.sentinel
from redis.backoff import NoBackoff
from redis.retry import Retry

from .config import DtqConfig
from .redis_url import RedisTarget

logger = logging.getLogger(__name__)

Address = tuple[str, int]
EVENTS = ("+switch-master", "+promoted-slave")
PING_EVERY_S = 1.0  # a silent subscription is checked this often; no answer by the next check: next sentinel
RETRY_S = 1.0  # between rounds when no sentinel answers
MIN_SENTINEL_TIMEOUT_S = 0.2  # a sentinel's share of the discovery's time, at least


def sentinel_timeout_s(timeout_s: float, sentinels: int) -> float:
    """How long one sentinel may take to answer while the master is being found: the whole
    discovery's budget (DTQ_REDIS_TIMEOUT_S) split across the sentinels, at least 0.2 s."""
    return max(MIN_SENTINEL_TIMEOUT_S, timeout_s / max(sentinels, 1))


def named_master(state: object, named: object) -> tuple[Address, int] | None:
    """The master one sentinel names, and its config epoch, from its replies to `SENTINEL MASTER`
    and `SENTINEL GET-MASTER-ADDR-BY-NAME`; None when it names none it vouches for (an error
    reply, or a master it sees down and has not replaced yet)."""
    if not isinstance(state, dict) or not isinstance(named, tuple | list) or len(named) != 2:
        return None
    host, port = named
    address = (host.decode() if isinstance(host, bytes) else str(host), int(port))
    epoch = int(state.get("config-epoch", 0))
    if address != (str(state.get("ip")), int(state.get("port", 0))):
        # The sentinel leading a failover names the replica it promoted (its INFO says master)
        # while its record of the master still holds the old address, until the failover ends.
        return address, epoch
    if not state.get("is_master") or state.get("is_sdown") or state.get("is_odown"):
        return None
    return address, epoch


class MasterWatch:
    """The master of one Sentinel service as this process knows it, kept current by a thread."""

    def __init__(self, nodes: tuple[tuple[str, int], ...], service: str, *, ssl: bool, timeout_s: float) -> None:
        self.nodes = nodes
        self.service = service
        self._ssl = ssl
        self._timeout_s = timeout_s
        self.master: Address | None = None
        self.epoch = -1  # the sentinels' config epoch of `master`: a failover raises it
        self.generation = 0  # master switches so far: wire.Line compares it before each exchange
        self._lock = threading.Lock()
        self._pools: weakref.WeakSet[Any] = weakref.WeakSet()  # blocking pools
        self._async_pools: weakref.WeakSet[Any] = weakref.WeakSet()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()
        self._failures = 0  # sentinels that failed in a row

    # -- what the clients call -------------------------------------------------------------------
    def attach(self, pool: Any, *, asynchronous: bool = False) -> None:
        """Drop this pool's connections to an old master from now on."""
        with self._lock:
            (self._async_pools if asynchronous else self._pools).add(pool)
        self.ensure_running()

    def ensure_running(self) -> None:
        """Start the thread, or start it again in a forked child (threads do not survive a fork)."""
        if self._thread is not None and self._pid == os.getpid():
            return
        with self._lock:
            if self._pid != os.getpid():
                self._pid, self._thread = os.getpid(), None
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=f"dtq-sentinel-{self.service}", daemon=True)
                self._thread.start()

    def current(self, address: Address, epoch: int) -> bool:
        """Whether a sentinel's answer is at least as new as what this process knows."""
        master = self.master
        return master is None or epoch > self.epoch or (epoch == self.epoch and address == master)

    def moved_from(self, address: Address) -> Address | None:
        """The master, when it is known and is not `address`."""
        master = self.master
        return master if master is not None and master != address else None

    def seen(self, address: Address, epoch: int, *, force: bool = False) -> None:
        """A sentinel names this master. A newer one than this process knows is a switch: every
        connection to the old one is dropped. force: take it even if older (every sentinel that
        answered says so: they were reset, or the newer ones are out of reach)."""
        with self._lock:
            if self.master is None or address == self.master:
                self.master, self.epoch = address, (epoch if force else max(epoch, self.epoch))
                return
            if epoch <= self.epoch and not force:
                return
            old, self.master, self.epoch = self.master, address, epoch
            self.generation += 1
            pools, async_pools = list(self._pools), list(self._async_pools)
        logger.warning("Sentinel service %s: the master moved from %s:%s to %s:%s (config epoch %s); "
                       "connections to the old master are dropped", self.service, *old, *address, epoch)
        for pool in pools:
            _cut_blocking(pool, address)
        for pool in async_pools:
            _cut_async_soon(pool, address)

    # -- the thread ------------------------------------------------------------------------------
    def _wanted(self) -> bool:
        return bool(self._pools) or bool(self._async_pools)

    def _run(self) -> None:
        position = 0
        while True:
            with self._lock:
                if not self._wanted():  # every client is gone: so is the thread (attach starts another)
                    self._thread = None
                    return
            host, port = self.nodes[position % len(self.nodes)]
            try:
                self._follow(host, port)
            except Exception as exc:  # noqa: BLE001 - any trouble with one sentinel: go on to the next
                self._failures += 1
                if self._failures == len(self.nodes):
                    logger.warning("Sentinel service %s: no sentinel answers (last: %s:%s, %s: %s); a master "
                                   "switch is seen only when a connection is opened, until one does",
                                   self.service, host, port, type(exc).__name__, exc)
            position += 1
            if self._failures >= len(self.nodes):
                time.sleep(RETRY_S)

    def _follow(self, host: str, port: int) -> None:
        """Subscribe on one sentinel and follow its announcements until it fails to answer."""
        client = redis.Redis(host, port, socket_timeout=self._timeout_s, socket_connect_timeout=self._timeout_s,
                             ssl=self._ssl, retry=Retry(NoBackoff(), 0), health_check_interval=0)
        pubsub = client.pubsub()  # type: ignore[no-untyped-call]  # unannotated in redis-py
        try:
            pubsub.subscribe(*EVENTS)
            self._check(client)  # a switch made while no subscription was listening
            if self._failures >= len(self.nodes):
                logger.info("Sentinel service %s: following the sentinels again", self.service)
            self._failures = 0
            pinged = False
            while self._wanted():
                message = pubsub.get_message(timeout=PING_EVERY_S)
                if message is None:
                    if pinged:
                        raise ConnectionError(f"no answer to PING within {PING_EVERY_S:g}s")
                    pubsub.ping()
                    pinged = True
                    continue
                pinged = False
                data = message.get("data")
                text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
                if message.get("type") == "message" and self.service in text.split():
                    self._check(client)
        finally:
            pubsub.close()
            client.close()

    def _check(self, client: redis.Redis) -> None:
        pipe = client.pipeline(transaction=False)
        pipe.sentinel_master(self.service)
        pipe.sentinel_get_master_addr_by_name(self.service)
        answer = named_master(*pipe.execute(raise_on_error=False))
        if answer is not None and self.current(*answer):
            self.seen(*answer)


_WATCHES: dict[tuple[Any, ...], MasterWatch] = {}
_WATCHES_LOCK = threading.Lock()


def watch_for(target: RedisTarget, config: DtqConfig) -> MasterWatch:
    """This process's watch of the target's service (one per sentinels and service name)."""
    key = (target.nodes, target.service_name, target.ssl)
    with _WATCHES_LOCK:
        watch = _WATCHES.get(key)
        if watch is None:
            watch = _WATCHES[key] = MasterWatch(target.nodes, target.service_name, ssl=target.ssl,
                                                timeout_s=config.redis_timeout_s)
    return watch


def _after_fork_in_child() -> None:
    """A forked child has none of its parent's threads, and a lock one of them held stays held."""
    global _WATCHES_LOCK
    _WATCHES_LOCK = threading.Lock()
    for watch in _WATCHES.values():
        watch._lock, watch._thread, watch._pid = threading.Lock(), None, os.getpid()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _cut_blocking(pool: Any, master: Address) -> None:
    """Drop a blocking pool's connections that lead elsewhere than `master`."""
    pool.disconnect(inuse_connections=False)  # idle: nobody holds them
    with pool._lock:  # redis-py's own lock over its lists of connections
        in_use = list(pool._in_use_connections)
    for conn in in_use:
        sock = conn._sock
        if sock is not None and (conn.host, conn.port) != master:
            try:
                # socket.socket's, not SSLSocket's (which would drop its TLS state under the owner)
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass  # closed meanwhile by its owner


_CUTS: set[asyncio.Task[None]] = set()  # the loop keeps only weak references to tasks


def _cut_async_soon(pool: Any, master: Address) -> None:
    """Drop an asyncio pool's connections to the old master, on the pool's own loop."""
    loop: asyncio.AbstractEventLoop | None = pool.loop
    if loop is None or loop.is_closed():
        return  # never connected, or its loop is gone (and its connections with it)

    def start() -> None:
        task = loop.create_task(_cut_async(pool, master))
        _CUTS.add(task)
        task.add_done_callback(_CUTS.discard)

    try:
        loop.call_soon_threadsafe(start)
    except RuntimeError:
        pass  # the loop closed meanwhile


async def _cut_async(pool: Any, master: Address) -> None:
    # In use or not: on its loop nothing runs between a coroutine's awaits, and one waiting for a
    # reply on a closed connection gets a ConnectionError.
    for conn in [*pool._available_connections, *pool._in_use_connections]:
        if conn.is_connected and (conn.host, conn.port) != master:
            try:
                await conn.disconnect(nowait=True)
            except Exception:  # noqa: BLE001 - it failed already
                pass


# -- the blocking client ---------------------------------------------------------------------------
class _Sentinels(redis.sentinel.Sentinel):
    def __init__(self, nodes: list[tuple[str, int]], *, watch: MasterWatch, timeout_s: float,
                 sentinel_kwargs: dict[str, Any]) -> None:
        super().__init__(nodes, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
        self.watch = watch
        self.budget_s = timeout_s

    def discover_master(self, service_name: str) -> Address:
        """The master's address, asking the sentinels in turn (see the module's docstring, 3)."""
        asking = _ask_in_turn(self, service_name)
        sentinel = next(asking)
        while isinstance(sentinel, redis.Redis):
            try:
                pipe = sentinel.pipeline(transaction=False)
                pipe.sentinel_master(service_name)
                pipe.sentinel_get_master_addr_by_name(service_name)
                reply: list[Any] | Exception = pipe.execute(raise_on_error=False)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                reply = exc
            sentinel = asking.send(reply)
        if isinstance(sentinel, str):
            raise redis.sentinel.MasterNotFoundError(sentinel)
        return cast("Address", sentinel)


def _ask_in_turn(sentinels: Any, service_name: str) -> Generator[Any, list[Any] | Exception, None]:
    """discover_master's choice, for the blocking and the asyncio client alike: yields each
    sentinel to ask (its driver sends back the pipeline's replies, or the connection error), then
    the master's address, or a string saying why none was found. Asks within the sentinels'
    budget_s, and moves the one that answered to the front for next time."""
    sentinels.watch.ensure_running()
    pick = _Pick(sentinels.watch, service_name)
    deadline = time.monotonic() + sentinels.budget_s
    for i, sentinel in enumerate(sentinels.sentinels):
        if i and time.monotonic() >= deadline:
            pick.errors.append("no time left for the other sentinels")
            break
        reply = yield sentinel
        if isinstance(reply, Exception):
            pick.errors.append(f"{sentinel} - {reply!r}")
            continue
        if (address := pick.offer(named_master(*reply))) is not None:
            sentinels.sentinels[0], sentinels.sentinels[i] = sentinel, sentinels.sentinels[0]  # asked first next time
            yield address
            return
    address = pick.last_resort()
    yield pick.failure() if address is None else address


class _Pick:
    """Which sentinel's answer discover_master takes: the first at least as new as what the
    process knows; failing that, the newest one (the sentinels were reset or the newer ones do
    not answer); failing that, none."""

    def __init__(self, watch: MasterWatch, service: str) -> None:
        self.watch, self.service = watch, service
        self.stale: tuple[Address, int] | None = None
        self.errors: list[str] = []

    def offer(self, answer: tuple[Address, int] | None) -> Address | None:
        if answer is None:
            return None
        if self.watch.current(*answer):
            self.watch.seen(*answer)
            return answer[0]
        if self.stale is None or answer[1] > self.stale[1]:
            self.stale = answer
        return None

    def last_resort(self) -> Address | None:
        if self.stale is None:
            return None
        self.watch.seen(*self.stale, force=True)
        return self.stale[0]

    def failure(self) -> str:
        return f"No master found for {self.service!r}" + (f" : {', '.join(self.errors)}" if self.errors else "")


class _MasterConnection(redis.sentinel.SentinelManagedConnection):
    def connect_to(self, address: Address) -> None:
        super().connect_to(address)  # type: ignore[no-untyped-call]
        # The master moved while this connected (the sentinels answered just before the switch).
        moved = self.connection_pool.sentinel_manager.watch.moved_from(address)
        if moved is not None:
            self.disconnect()  # type: ignore[no-untyped-call]
            super().connect_to(moved)  # type: ignore[no-untyped-call]


class _MasterSSLConnection(_MasterConnection, redis.connection.SSLConnection):
    pass


class _MasterPool(redis.sentinel.SentinelConnectionPool):
    def __init__(self, service_name: str, sentinel_manager: _Sentinels, **kwargs: Any) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]
        self.master_watch = sentinel_manager.watch  # what wire.py compares its generation with
        self.master_watch.attach(self)


def sync_master(target: RedisTarget, config: DtqConfig, options: dict[str, Any]) -> redis.Redis:
    """A blocking client of the service's master (connection.sync_client's options)."""
    watch = watch_for(target, config)
    sentinels = _Sentinels(list(target.nodes), watch=watch, timeout_s=config.redis_timeout_s,
                           sentinel_kwargs=sentinel_options(target, config))
    client: redis.Redis = sentinels.master_for(  # type: ignore[no-untyped-call]
        target.service_name, redis_class=redis.Redis, connection_pool_class=_MasterPool,
        connection_class=_MasterSSLConnection if target.ssl else _MasterConnection,
        **options, **_master_options(target))
    return client


# -- the asyncio client ----------------------------------------------------------------------------
class _AsyncSentinels(aiosentinel.Sentinel):
    def __init__(self, nodes: list[tuple[str, int]], *, watch: MasterWatch, timeout_s: float,
                 sentinel_kwargs: dict[str, Any]) -> None:
        super().__init__(nodes, sentinel_kwargs=sentinel_kwargs)  # type: ignore[no-untyped-call]
        self.watch = watch
        self.budget_s = timeout_s

    async def discover_master(self, service_name: str) -> Address:
        """_Sentinels.discover_master, on the event loop."""
        asking = _ask_in_turn(self, service_name)
        sentinel = next(asking)
        while isinstance(sentinel, aioredis.Redis):
            try:
                pipe = sentinel.pipeline(transaction=False)
                pipe.sentinel_master(service_name)
                pipe.sentinel_get_master_addr_by_name(service_name)
                reply: list[Any] | Exception = await pipe.execute(raise_on_error=False)
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                reply = exc
            sentinel = asking.send(reply)
        if isinstance(sentinel, str):
            raise aiosentinel.MasterNotFoundError(sentinel)
        return cast("Address", sentinel)


class _AsyncMasterConnection(aiosentinel.SentinelManagedConnection):
    async def connect_to(self, address: Address) -> None:
        await super().connect_to(address)  # type: ignore[no-untyped-call]
        moved = self.connection_pool.sentinel_manager.watch.moved_from(address)
        if moved is not None:
            await self.disconnect()
            await super().connect_to(moved)  # type: ignore[no-untyped-call]


class _AsyncMasterSSLConnection(_AsyncMasterConnection, aioredis.SSLConnection):
    pass


class _AsyncMasterPool(aiosentinel.SentinelConnectionPool):
    def __init__(self, service_name: str, sentinel_manager: _AsyncSentinels, **kwargs: Any) -> None:
        super().__init__(service_name, sentinel_manager, **kwargs)  # type: ignore[no-untyped-call]
        self.loop: asyncio.AbstractEventLoop | None = None  # where its connections live, once it has some
        self.master_watch = sentinel_manager.watch
        self.master_watch.attach(self, asynchronous=True)

    async def get_master_address(self) -> Address:
        self.loop = asyncio.get_running_loop()
        address: Address = await super().get_master_address()  # type: ignore[no-untyped-call]
        return address


def async_master(target: RedisTarget, config: DtqConfig, options: dict[str, Any]) -> aioredis.Redis:
    """An asyncio client of the service's master (connection.async_client's options)."""
    watch = watch_for(target, config)
    sentinels = _AsyncSentinels(list(target.nodes), watch=watch, timeout_s=config.redis_timeout_s,
                                sentinel_kwargs=sentinel_options(target, config, asynchronous=True))
    client: aioredis.Redis = sentinels.master_for(
        target.service_name, redis_class=aioredis.Redis, connection_pool_class=_AsyncMasterPool,
        connection_class=_AsyncMasterSSLConnection if target.ssl else _AsyncMasterConnection,
        **options, **_master_options(target))
    return client


def sentinel_options(target: RedisTarget, config: DtqConfig, *, asynchronous: bool = False) -> dict[str, Any]:
    """How dtq talks to the sentinels themselves: each for its share of DTQ_REDIS_TIMEOUT_S (so
    that sentinels that do not answer cost one timeout, not one each), no retries (the next
    sentinel in the list is the retry), no password (the URL's password is the master's)."""
    timeout_s = sentinel_timeout_s(config.redis_timeout_s, len(target.nodes))
    retry = (aioretry.Retry if asynchronous else Retry)(NoBackoff(), 0)
    return {"socket_timeout": timeout_s, "socket_connect_timeout": timeout_s, "retry": retry, "ssl": target.ssl}


def _master_options(target: RedisTarget) -> dict[str, Any]:
    options: dict[str, Any] = {"db": target.db, "username": target.username, "password": target.password}
    if target.ssl:
        options["ssl"] = True  # SentinelConnectionPool pops it (the connection class says TLS)
    return options
