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
anew. A connection error is not retried: the command may have run, and only its caller knows
whether running it twice is safe (scripts are idempotent where dtq retries them). The blocking
exchange raises it; the worker's RoutedLines answers it for that master's commands only, as the
other masters' replies stand (their commands ran: a fetch's claims there must reach the worker).
"""

from __future__ import annotations

import asyncio
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
Routed = tuple[str, bytes]  # (routing key, packed command)


def not_run_here(reply: object) -> bool:
    """Redis refused the command without running it: the slot moved, or this node is a replica now."""
    if isinstance(reply, redis.exceptions.ReadOnlyError):
        return True
    return isinstance(reply, redis.exceptions.ResponseError) and str(reply).startswith(("MOVED", "ASK", "READONLY",
                                                                                         "TRYAGAIN", "CLUSTERDOWN"))


def is_cluster(client: object) -> bool:
    return isinstance(client, redis.cluster.RedisCluster | aiocluster.RedisCluster)


def exchange_routed(client: redis.Redis | redis.cluster.RedisCluster, commands: Sequence[Routed]) -> list[Any]:
    """Send commands (blocking client) and return their replies in order; an error reply comes
    back as its exception."""
    if not isinstance(client, redis.cluster.RedisCluster):
        return exchange_pooled(client.connection_pool, [command for _, command in commands])
    replies: list[Any] = [None] * len(commands)
    pending = list(range(len(commands)))
    for attempt in range(MAX_REDIRECTS + 1):
        groups: dict[Any, list[int]] = defaultdict(list)
        for i in pending:
            groups[client.nodes_manager.get_node_from_slot(key_slot(commands[i][0].encode()))].append(i)
        again: list[int] = []
        for node, indexes in groups.items():
            pool = client.get_redis_connection(node).connection_pool
            try:
                got = exchange_pooled(pool, [commands[i][1] for i in indexes])
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
                client.nodes_manager.initialize()  # a failover: the next call finds the new master
                raise
            for i, reply in zip(indexes, got, strict=True):
                if not_run_here(reply) and attempt < MAX_REDIRECTS:
                    again.append(i)
                else:
                    replies[i] = reply
        if not again:
            break
        client.nodes_manager.initialize()
        pending = again
    return replies


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
        for attempt in range(MAX_REDIRECTS + 1):
            groups: dict[str, tuple[Any, list[int]]] = {}
            for i in pending:
                node = client.nodes_manager.get_node_from_slot(key_slot(commands[i][0].encode()))
                groups.setdefault(node.name, (node, []))[1].append(i)
            names = list(groups)
            results = await asyncio.gather(
                *(self._line_for(groups[name][0]).exchange([commands[i][1] for i in groups[name][1]], timeout_s)
                  for name in names), return_exceptions=True)
            again: list[int] = []
            failed = False
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
                    else:
                        replies[i] = reply
            if failed or again:
                await client.nodes_manager.initialize()  # a failover: the next call finds the new master
            if not again:
                break
            pending = again
        return replies

    async def close(self) -> None:
        lines = list(self._lines.values()) + ([self._single] if self._single is not None else [])
        for line in lines:
            await line.close()


__all__ = ["RoutedLines", "exchange_routed", "is_cluster", "not_run_here", "pack"]
