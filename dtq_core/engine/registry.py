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
from .plumbing import Noun

LAYOUT_CACHE_S = 2.0


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
        """Every registered queue's layout (cached for LAYOUT_CACHE_S unless fresh)."""
        now = time.monotonic()
        if not fresh and self._cache is not None and now - self._cache[0] < LAYOUT_CACHE_S:
            return self._cache[1]
        layouts = parse_registry(text_hash(self.client.hgetall(self.keys.queues())))
        self._cache = (now, layouts)
        return layouts

    def get(self, queue: str, *, fresh: bool = False) -> Layout | None:
        """The queue's layout, or None when it is not registered."""
        return self.layouts(fresh=fresh).get(queue)

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
