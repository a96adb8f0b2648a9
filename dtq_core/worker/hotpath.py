"""The worker's hot-path transport: script calls sent in one write per Redis node on connections
of their own (dtq_core.routing.RoutedLines over wire.Line), replies read back in order.

Every hot-path script works on one partition and is routed by its KEYS[1], the partition's key
prefix: on one node, a fetch of any number of partitions, or a completion of any number of
partition batches, is one round trip; on a cluster, one per master, the masters in parallel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

from ..routing import Routed, RoutedLines
from ..scripts import Scripts, load
from ..scripts.library import is_unknown


@dataclass(frozen=True, slots=True)
class Call:
    """One packed script call: its script and arguments (to load it and pack it again after a
    reply that says the node lacks it) and its KEYS[1] (routing)."""

    script: str
    key: str
    command: bytes
    scripts: Scripts
    keys: tuple[str, ...]
    args: tuple[object, ...]

    @classmethod
    def of(cls, scripts: Scripts, name: str, *, keys: Sequence[str], args: Sequence[object]) -> Call:
        key, command = scripts.routed(name, keys=keys, args=args)
        return cls(name, key, command, scripts, tuple(keys), tuple(args))

    def packed_again(self) -> bytes:
        """The call packed anew: an FCALL becomes an EVALSHA once its Redis refused functions."""
        return self.scripts.command(self.script, keys=self.keys, args=self.args)


class HotPath:
    """Sends script calls, one write per node; replies come back in the order of the calls, an
    error reply as its exception (not raised)."""

    def __init__(self, client: aioredis.Redis, *, timeout_s: float) -> None:
        self.client = client
        self.timeout_s = timeout_s  # for one exchange
        self.lines = RoutedLines(client)

    async def exchange(self, calls: Sequence[Call], tail: Sequence[Routed] = (), wait_s: float = 0.0,
                       head: Sequence[Routed] = ()) -> list[Any]:
        """Send `head` (commands the calls must wait for on their node's connection, such as a
        BLPOP), the calls, then `tail` (commands that must follow them, such as a WAIT), and
        return every reply in that order. A script Redis does not know (restarted, failed over,
        or SCRIPT FLUSH) did not run: load it and send those calls again, together, with the
        tail again (a WAIT counts only the writes made before it), not the head. wait_s: how
        long a blocking command of the head or tail may wait, on top of the usual timeout."""
        if not calls:
            return []
        timeout_s = self.timeout_s + wait_s
        sent = await self.lines.exchange([*head, *((c.key, c.command) for c in calls), *tail], timeout_s)
        heads, replies = sent[:len(head)], sent[len(head):]
        unknown = [i for i, reply in enumerate(replies[:len(calls)]) if is_unknown(reply)]
        if unknown:
            for name in sorted({calls[i].script for i in unknown}):
                await _load(self.client, name)
            again = await self.lines.exchange([(calls[i].key, calls[i].packed_again()) for i in unknown]
                                              + list(tail), timeout_s)
            for i, reply in zip(unknown, again, strict=False):
                replies[i] = reply
            if tail:
                replies[len(calls):] = again[len(unknown):]
        return heads + replies if head else replies

    async def close(self) -> None:
        await self.lines.close()


async def _load(client: aioredis.Redis, name: str) -> None:
    """Load a script the node lacks. A node that forgot it has usually just restarted, and the
    client's pooled connection may still be the one from before (the hot path's own lines do not
    use the pool): redis-py drops a connection that fails, so once more goes out on a new one."""
    try:
        await load(client, name)
    except redis.exceptions.ConnectionError:
        await load(client, name)
