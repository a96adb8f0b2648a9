"""Packed commands routed to the Redis node that owns their key: the hot-path exchanges of wire.py
on Redis Cluster as well as on one node.

Each command comes with its routing key (KEYS[1] of a script: every key a script touches is in
that key's slot). On one node (or behind Sentinel) everything goes down one connection, as
before. On a cluster, commands are grouped by the master owning their slot and each group goes
down that master's connection in one write: a batch costs one round trip per master, not per
command (the worker's RoutedLines sends the groups at once; the blocking exchange_routed, on the
API's request path, one master after the other).

A command Redis did not run because its slot lives elsewhere (MOVED, ASK: a resharding) or
because the node was demoted (READONLY: a failover) is sent again after the slot map is read
anew; one refused with TRYAGAIN (a script call while its slot migrates: the slot guard of
scripts/__init__.py) is sent again after a short wait. A connection error is not retried: the
command may have run, and only its caller knows whether running it twice is safe (scripts are
idempotent where dtq retries them). The blocking
exchange raises it; the worker's RoutedLines answers it for that master's commands only, as the
other masters' replies stand (their commands ran: a fetch's claims there must reach the worker).
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
import redis.cluster
from redis.crc import key_slot

from .wire import Line, exchange_pooled, pack

MAX_REDIRECTS = 5
# Waits before sending again a command refused with TRYAGAIN (its slot is migrating: a script's
# declared keys are split between two masters, scripts/__init__.py's slot guard): 0.38 s in all,
# redis-py's own budget, then the caller gets the refusal (a 503, a worker's back-off).
TRYAGAIN_WAITS_S = (0.01, 0.02, 0.05, 0.1, 0.2)
Routed = tuple[str, bytes]  # (routing key, packed command)


def not_run_here(reply: object) -> bool:
    """Redis refused the command without running it: the slot moved or is migrating (MOVED, ASK),
    the cluster is settling (TRYAGAIN, CLUSTERDOWN), or this node is a replica now (READONLY).
    redis-py parses these replies into their own exceptions, whose text drops the keyword."""
    if isinstance(reply, (redis.exceptions.ReadOnlyError, redis.exceptions.AskError,
                          redis.exceptions.TryAgainError, redis.exceptions.ClusterDownError)):
        return True
    return isinstance(reply, redis.exceptions.ResponseError) and str(reply).startswith(("MOVED", "ASK", "READONLY",
                                                                                         "TRYAGAIN", "CLUSTERDOWN"))


def asked_elsewhere(reply: object) -> tuple[str, int] | None:
    """The node an ASK reply sends the command to (its slot is migrating there): the command
    goes there once, behind ASKING, without changing the slot map (MOVED changes it)."""
    if isinstance(reply, redis.exceptions.AskError) and not isinstance(reply, redis.exceptions.MovedError):
        return reply.host, reply.port
    return None


ASKING = pack(["ASKING"])


def settling(reply: object) -> bool:
    """TRYAGAIN: the keys of a multi-key command are split by a migrating slot; wait, then retry."""
    return isinstance(reply, redis.exceptions.TryAgainError) or (
        isinstance(reply, redis.exceptions.ResponseError) and str(reply).startswith("TRYAGAIN"))


def _asked_node(client: redis.cluster.RedisCluster, host: str, port: int) -> Any:
    """The node an ASK names. A master added to the cluster owns no slot until its first has
    moved, so the slot map does not list it: made here, and kept until the map is next read.
    (Only here: redis-py's own lookup answers None for it, and its ASK handling then fails.)"""
    node = client.get_node(host, port)
    if node is None:
        node = redis.cluster.ClusterNode(host, port, server_type=redis.cluster.PRIMARY)
        client.nodes_manager.create_redis_connections([node])
        client.nodes_manager.nodes_cache[node.name] = node
    return node


def _asked_async_node(client: aiocluster.RedisCluster, host: str, port: int) -> Any:
    """_asked_node for the asyncio client (RoutedLines opens its own Line from the node)."""
    node = client.get_node(host, port)
    if node is None:
        node = aiocluster.ClusterNode(host, port, server_type=redis.cluster.PRIMARY,
                                      **client.nodes_manager.connection_kwargs)
        client.nodes_manager.nodes_cache[node.name] = node
    return node


def is_cluster(client: object) -> bool:
    return isinstance(client, redis.cluster.RedisCluster | aiocluster.RedisCluster)


_CLUSTER_CLASSES: dict[type, bool] = {}  # client class -> a blocking RedisCluster


def _blocking_cluster(client: object) -> bool:
    """isinstance(client, RedisCluster), remembered per class: redis-py makes that check go
    through typing's Protocol machinery, a few µs on every submit."""
    kind = type(client)
    known = _CLUSTER_CLASSES.get(kind)
    if known is None:
        known = _CLUSTER_CLASSES[kind] = isinstance(client, redis.cluster.RedisCluster)
    return known


def exchange_routed(client: redis.Redis | redis.cluster.RedisCluster, commands: Sequence[Routed], *,
                    each_master: bool = False) -> list[Any]:
    """Send commands (blocking client) and return their replies in order; an error reply comes
    back as its exception. A master that does not answer raises its connection error, unless
    each_master: then that error is the reply of each of its commands (which may or may not have
    run) and the other masters' commands still go, for a caller that answers each command on its
    own (a batch submit: the tasks the live masters queued must not be reported as failed)."""
    if not _blocking_cluster(client):
        pool = client.connection_pool  # type: ignore[union-attr]  # a Redis: _blocking_cluster said so
        return exchange_pooled(pool, [command for _, command in commands])
    assert isinstance(client, redis.cluster.RedisCluster)
    replies: list[Any] = [None] * len(commands)
    pending = list(range(len(commands)))
    asked: dict[int, tuple[str, int]] = {}  # command -> the node an ASK sent it to
    stale_map = False  # a master did not answer (each_master): read the slot map before returning
    for attempt in range(MAX_REDIRECTS + 1):
        groups: dict[Any, list[int]] = defaultdict(list)
        for i in pending:
            node = _asked_node(client, *asked[i]) if i in asked else None
            groups[node or client.nodes_manager.get_node_from_slot(key_slot(commands[i][0].encode()))].append(i)
        was_asked, asked = asked, {}
        again: list[int] = []
        wait = False
        for node, indexes in groups.items():
            pool = client.get_redis_connection(node).connection_pool
            packed = [part for i in indexes
                      for part in ((ASKING, commands[i][1]) if i in was_asked else (commands[i][1],))]
            try:
                got = _answers(exchange_pooled(pool, packed), [i in was_asked for i in indexes])
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
                if not each_master:
                    client.nodes_manager.initialize()  # a failover: the next call finds the new master
                    raise
                for i in indexes:
                    replies[i] = exc
                stale_map = True
                continue
            for i, reply in zip(indexes, got, strict=True):
                if not_run_here(reply) and attempt < MAX_REDIRECTS:
                    again.append(i)
                    wait = wait or settling(reply)
                    if (target := asked_elsewhere(reply)) is not None:
                        asked[i] = target
                else:
                    replies[i] = reply
        if not again:
            break
        if wait:
            time.sleep(TRYAGAIN_WAITS_S[attempt])
        if any(i not in asked for i in again):
            client.nodes_manager.initialize()
        pending = again
    if stale_map:
        _read_slot_map(client)
    return replies


def _read_slot_map(client: redis.cluster.RedisCluster) -> None:
    """Read the slot map anew after a master failed to answer (a failover: the next call finds
    the new master); the replies in hand stand if no node answers that either."""
    try:
        client.nodes_manager.initialize()
    except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, redis.exceptions.RedisClusterException):
        pass


def _answers(replies: list[Any], asking: list[bool]) -> list[Any]:
    """The commands' own replies, without the +OK of the ASKING sent before an asked command."""
    answers, position = [], 0
    for behind_asking in asking:
        position += 1 if behind_asking else 0
        answers.append(replies[position])
        position += 1
    return answers


class RoutedLines:
    """The worker's hot-path connection(s): one Line on one node, one Line per master on a
    cluster, with the same exchange() for both (but on a cluster a master that fails answers
    its commands with the error, where one node raises it)."""

    def __init__(self, client: aioredis.Redis | aiocluster.RedisCluster) -> None:
        self._client = client
        self._single = None if isinstance(client, aiocluster.RedisCluster) else Line(client)
        self._lines: dict[str, Line] = {}

    def _line_for(self, node: Any) -> Line:
        line = self._lines.get(node.name)
        if line is None:
            line = self._lines[node.name] = Line.to(node.connection_class, node.connection_kwargs)
        return line

    async def exchange(self, commands: Sequence[Routed], timeout_s: float) -> list[Any]:
        if self._single is not None:
            return await self._single.exchange([command for _, command in commands], timeout_s)
        client = self._client
        assert isinstance(client, aiocluster.RedisCluster)
        if not client.nodes_manager.slots_cache:
            await client.initialize()
        replies: list[Any] = [None] * len(commands)
        pending = list(range(len(commands)))
        asked: dict[int, tuple[str, int]] = {}  # command -> the node an ASK sent it to
        for attempt in range(MAX_REDIRECTS + 1):
            groups: dict[str, tuple[Any, list[int]]] = {}
            for i in pending:
                node = _asked_async_node(client, *asked[i]) if i in asked else None
                node = node or client.nodes_manager.get_node_from_slot(key_slot(commands[i][0].encode()))
                groups.setdefault(node.name, (node, []))[1].append(i)
            names = list(groups)
            results = await asyncio.gather(
                *(self._send(groups[name][0], [(commands[i][1], i in asked) for i in groups[name][1]], timeout_s)
                  for name in names), return_exceptions=True)
            asked = {}
            again: list[int] = []
            failed = wait = False
            for name, got in zip(names, results, strict=True):
                indexes = groups[name][1]
                if isinstance(got, BaseException):
                    if not isinstance(got, Exception):
                        raise got  # cancelled: the worker is stopping
                    # A master down (or failing over): its commands' replies are the error, and
                    # the others' stand. Raising instead would drop what the live masters did,
                    # such as the claims of a fetch, left to be reclaimed as lost attempts.
                    failed = True
                    for i in indexes:
                        replies[i] = got
                    continue
                for i, reply in zip(indexes, got, strict=True):
                    if not_run_here(reply) and attempt < MAX_REDIRECTS:
                        again.append(i)
                        wait = wait or settling(reply)
                        if (target := asked_elsewhere(reply)) is not None:
                            asked[i] = target
                    else:
                        replies[i] = reply
            if failed or any(i not in asked for i in again):
                await client.nodes_manager.initialize()  # a failover: the next call finds the new master
            if not again:
                break
            if wait:
                await asyncio.sleep(TRYAGAIN_WAITS_S[attempt])
            pending = again
        return replies

    async def _send(self, node: Any, commands: list[tuple[bytes, bool]], timeout_s: float) -> list[Any]:
        """One node's commands in one write; an asked one goes behind ASKING."""
        packed = [part for command, asked in commands for part in ((ASKING, command) if asked else (command,))]
        return _answers(await self._line_for(node).exchange(packed, timeout_s), [asked for _, asked in commands])

    async def close(self) -> None:
        lines = list(self._lines.values()) + ([self._single] if self._single is not None else [])
        for line in lines:
            await line.close()


__all__ = ["RoutedLines", "exchange_routed", "is_cluster", "not_run_here", "pack"]
