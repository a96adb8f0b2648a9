"""The partition registry as the engine reads and writes it (dtq_core/partitions.py says what it is).

Submitters cache the layouts for LAYOUT_CACHE_S: a submit to a known queue costs no extra round
trip. A new queue costs two (register, open its partitions), once per process.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from ..errors import ErrorCode, PartitionClosed, raise_for_code
from ..keys import Keys
from ..partitions import Layout, choose_tags, parse_registry
from ..replies import text_hash
from ..routing import is_cluster
from .plumbing import Noun

LAYOUT_CACHE_S = 2.0
TOMBSTONE_TTL_S = 86400  # how long a deleted queue's partitions refuse its stale submitters


def slot_map(client: Any) -> tuple[Callable[[int], str] | None, list[str]]:
    """(slot -> master name, master names) on Redis Cluster; (None, []) on one node."""
    if not isinstance(client, redis.cluster.RedisCluster):
        return None, []
    nodes = client.nodes_manager
    masters = sorted(node.name for node in client.get_primaries())
    return (lambda slot: str(nodes.get_node_from_slot(slot).name)), masters


class Registry(Noun):
    """Queue -> partition layout, with a short-lived cache."""

    _cache: tuple[float, dict[str, Layout]] | None = None

    def layouts(self, *, fresh: bool = False) -> dict[str, Layout]:
        """Every registered queue's layout (cached for LAYOUT_CACHE_S unless fresh). When the
        registry cannot be read on a cluster (its master is down), a cached copy of any age
        serves a read that need not be fresh: a submit to a partition on a live master goes on,
        and a layout gone stale meanwhile is refused by the partition itself (PARTITION_CLOSED)."""
        now = time.monotonic()
        if not fresh and self._cache is not None and now - self._cache[0] < LAYOUT_CACHE_S:
            return self._cache[1]
        try:
            raw = self.client.hgetall(self.keys.queues())
        except redis.exceptions.RedisError:
            if fresh or self._cache is None or not is_cluster(self.client):
                raise  # one node (or Sentinel): the partitions are down with it, and a 503 is due at once
            self._cache = (now, self._cache[1])  # read again in LAYOUT_CACHE_S, not on every submit
            return self._cache[1]
        layouts = parse_registry(text_hash(raw))
        self._cache = (now, layouts)
        return layouts

    def get(self, queue: str, *, fresh: bool = False) -> Layout | None:
        """The queue's layout, or None when it is not registered."""
        return self.layouts(fresh=fresh).get(queue)

    def cached(self, queue: str) -> bool:
        """Whether the cache serves the queue's layout without a read (on a cluster whose registry
        master is down, the copy in hand is kept on for LAYOUT_CACHE_S at each failed read)."""
        return (self._cache is not None and queue in self._cache[1]
                and time.monotonic() - self._cache[0] < LAYOUT_CACHE_S)

    def forget_cache(self) -> None:
        self._cache = None

    def ensure(self, queue: str) -> Layout:
        """The queue's layout, registering the queue (QueueLimitReached past DTQ_MAX_QUEUES) and
        opening its partitions when it is new; refreshes the cache."""
        layout = self.get(queue)
        if layout is not None:
            return layout
        layouts = self.layouts(fresh=True)
        if queue in layouts:
            return layouts[queue]
        master_of_slot, masters = slot_map(self.client)
        taken = [tag for other in layouts.values() for tag in other.all_tags]
        proposed = Layout(queue=queue, tags=tuple(choose_tags(queue, 0, self.config.partitions_of(queue), taken,
                                                              master_of_slot=master_of_slot, masters=masters)))
        code, raw = self.scripts("registerQueue", keys=[self.keys.queues()],
                                 args=[queue, proposed.to_json(), self.config.max_queues])
        if int(code) < 0:
            raise_for_code(int(code), task_id=None, script="registerQueue", queue=queue, count=raw,
                           max_queues=self.config.max_queues)
        layout = Layout.from_json(queue, raw)
        self.open(layout)
        # Cached with the copy just read, so the next submit to the queue costs no extra read.
        self._cache = (time.monotonic(), {**layouts, queue: layout})
        return layout

    def open(self, layout: Layout) -> None:
        """Open every partition of a layout (idempotent); PartitionClosed when one belongs to
        another life of the queue (it was deleted meanwhile)."""
        pipe = self.client.pipeline(transaction=False)
        for tag in layout.all_tags:
            self.scripts("openPartition", keys=[self.keys.partition(tag)],
                         args=[layout.owner, layout.queue, Keys.GROUP], client=pipe)
        for reply in self.scripts.execute(pipe):
            if int(reply) == ErrorCode.PARTITION_CLOSED:
                self.forget_cache()
                raise PartitionClosed(f"a partition of queue {layout.queue!r} is closed", queue=layout.queue)

    def unregister(self, layout: Layout) -> None:
        """Forget a deleted queue whose partitions a delete has closed (deleteQueue close on each):
        drop their keys, leaving each owner a tombstone for TOMBSTONE_TTL_S (a submitter holding the
        layout is refused meanwhile), fold the statistics the drops took out into the global ones,
        so the /metrics counters never go back, and remove the registry entry and its pause. Two
        round trips.

        A drop hands a partition's statistics to its caller only (includes/stats.lua): when two
        deletes of the queue race, one of them folds each partition's counts, the other folds
        nothing. A process that dies between the two round trips loses those counts (the counters
        go back once, as after a reset) rather than ever counting them twice; the registry entry
        is still there, so running the delete again finishes it."""
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        for tag in layout.all_tags:
            self.scripts("deleteQueue", keys=[k.partition(tag)],
                         args=["drop", layout.owner, layout.queue, TOMBSTONE_TTL_S], client=pipe)
        dropped = self.scripts.execute(pipe)
        pipe = self.client.pipeline(transaction=False)
        fold_stats(pipe, k, [reply[1:] for reply in dropped if int(reply[0]) == ErrorCode.OK])
        pipe.hdel(k.queues(), layout.queue)
        pipe.hdel(k.paused_index(), layout.queue)
        pipe.execute()
        self.forget_cache()


def fold_stats(pipe: Any, keys: Keys, taken: list[list[Any]]) -> None:
    """Queue on pipe the increments that add statistics taken out of partitions (includes/stats.lua:
    per partition, its stats:tasks, stats:duration and stats:counters as flat HGETALL replies) to
    the global hashes. Works on a blocking or an asyncio pipeline (queueing a command is not
    awaited on either)."""
    targets = (keys.global_stats_tasks(), keys.global_stats_duration(), keys.global_stats_counters())
    for i, key in enumerate(targets):
        fold_into(pipe, key, [_pairs(partition[i]) for partition in taken])


def _pairs(flat: list[Any]) -> dict[str, str]:
    """A flat HGETALL reply from a script ([field, value, ...]) as a dict."""
    return dict(zip(flat[0::2], flat[1::2], strict=True))


def fold_into(pipe: Any, key: str, hashes: list[dict[str, str]]) -> None:
    """Queue on pipe the increments that add the hashes' numeric fields to the hash at key.
    HINCRBYFLOAT writes a whole number as one ("12", not "12.0"), so a counter stays an integer
    that HINCRBY can go on adding to."""
    totals: dict[str, float] = {}
    for fields in hashes:
        for name, raw in fields.items():
            try:
                totals[name] = totals.get(name, 0.0) + float(raw)
            except (TypeError, ValueError):
                continue  # written by hand: not a count
    for name, value in totals.items():
        if value:
            pipe.hincrbyfloat(key, name, value)
