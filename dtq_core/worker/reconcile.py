"""Partition reconcile, run by the scheduler leader every few seconds: each registered queue gets
the number of partitions DTQ_QUEUE_PARTITIONS gives it (docs/deployment.md, "Queue partitions").

- Raised: new partitions are appended to the queue's tags (a partition still draining from an
  earlier lowering serves again first). They are opened (owner key, consumer groups, the queue's
  pause) before the layout naming them is published, so a submit can never reach a partition
  that is not ready. Submitters pick the new layout up within their cache time; what was queued
  before stays where it is and runs there.
- Lowered: the last partitions move from `tags` to `draining`. Submits stop going there; workers
  and the leader keep serving them until they are empty.
- A draining partition that holds nothing (closePartition-1.lua checks and closes it in one step)
  is removed from the layout. The close hands over the partition's statistics, which the leader
  adds to the global ones before publishing the layout without it, so the /metrics counters
  (dtq_tasks_total, ...) never go back. Each partition's counts are handed over once (a close run
  again hands over nothing); a leader that dies between the close and the fold loses them (the
  counters go back once, as after a reset) rather than ever counting them twice.

Every registry write is a compare-and-set of the queue's layout (reconcileQueue-1.lua), so a
delete, a re-registration or a second leader's write in between is never overwritten.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ..config import DtqConfig
from ..partitions import Layout, choose_tags, parse_registry
from .store import WorkerStore

logger = logging.getLogger("dtq.worker")


@dataclass(frozen=True, slots=True)
class Resize:
    """How a queue's layout moves towards its configured partition count."""

    revive: tuple[str, ...] = ()  # draining partitions that serve again
    add: int = 0  # new partitions to open after them
    drop: tuple[str, ...] = ()  # serving partitions that start draining


def plan_resize(layout: Layout, want: int) -> Resize | None:
    """None when the queue already has `want` serving partitions."""
    have = len(layout.tags)
    if want == have:
        return None
    if want < have:
        return Resize(drop=layout.tags[want:])
    revive = layout.draining[:want - have]
    return Resize(revive=revive, add=want - have - len(revive))


def resized(layout: Layout, plan: Resize, new_tags: tuple[str, ...]) -> Layout:
    """The layout after `plan`, with `new_tags` as its new partitions (partition order kept: a
    submit's idempotency key picks a partition by its index)."""
    serving = layout.tags[:len(layout.tags) - len(plan.drop)] + plan.revive + new_tags
    draining = tuple(t for t in layout.draining if t not in plan.revive) + plan.drop
    return dataclasses.replace(layout, tags=serving, draining=draining)


def without_draining(layout: Layout, closed: set[str]) -> Layout:
    return dataclasses.replace(layout, draining=tuple(t for t in layout.draining if t not in closed))


class PartitionReconciler:
    """The leader's reconcile rounds (stateful only in the tags found owned by someone else)."""

    def __init__(self, store: WorkerStore, config: DtqConfig) -> None:
        self.store, self.config = store, config
        self.unusable: set[str] = set()  # tags openPartition refused: never proposed again

    async def run_once(self) -> dict[str, str]:
        """One round over every registered queue; returns the registry as it stands after it."""
        registry = await self.store.read_registry()
        layouts = parse_registry(registry)
        taken = {tag for layout in layouts.values() for tag in layout.all_tags}
        for queue, layout in sorted(layouts.items()):
            published = await self._reconcile(layout, registry[queue], taken)
            if published is not None:
                registry[queue] = published.to_json()
                taken.update(published.all_tags)
        return registry

    async def _reconcile(self, layout: Layout, read: str, taken: set[str]) -> Layout | None:
        """Move one queue's layout a step towards its configured count; the layout published, or
        None when nothing changed."""
        new = layout
        plan = plan_resize(layout, self.config.partitions_of(layout.queue))
        if plan is not None:
            new_tags = tuple(await self._choose(layout, plan, taken))
            refused = await self.store.open_partitions(layout, plan.revive + new_tags)
            if refused:
                self.unusable.update(refused)
                logger.warning("worker_id=%s queue=%s partition(s) %s belong to another layout; choosing others "
                               "next round", self.store.worker_id, layout.queue, ",".join(refused))
                return None
            new = resized(layout, plan, new_tags)
        # Only partitions the published layout already drains: one dropped just now may still get
        # submits from a layout cached before this round, and those must find it open.
        still_draining = [t for t in layout.draining if t in new.draining]
        if still_draining:
            closed = await self.store.close_partitions(layout, still_draining)
            new = without_draining(new, set(closed))
        if new == layout:
            return None
        if not await self.store.replace_layout(layout.queue, read, new):
            logger.info("worker_id=%s queue=%s layout changed during reconcile; next round", self.store.worker_id,
                        layout.queue)
            return None
        self._log_change(layout, new)
        return new

    async def _choose(self, layout: Layout, plan: Resize, taken: set[str]) -> list[str]:
        if plan.add == 0:
            return []
        master_of_slot, masters = await self.store.slot_map()
        return choose_tags(layout.queue, len(layout.tags) + len(plan.revive), plan.add, taken | self.unusable,
                           master_of_slot=master_of_slot, masters=masters)

    def _log_change(self, old: Layout, new: Layout) -> None:
        added = [t for t in new.tags if t not in old.tags]
        dropped = [t for t in new.draining if t not in old.draining]
        forgotten = [t for t in old.all_tags if t not in new.all_tags]
        worker_id = self.store.worker_id
        if added:
            logger.info("worker_id=%s queue=%s now has %d partition(s): added %s", worker_id, new.queue,
                        len(new.tags), ",".join(added))
        if dropped:
            logger.info("worker_id=%s queue=%s now has %d partition(s): %s draining", worker_id, new.queue,
                        len(new.tags), ",".join(dropped))
        if forgotten:
            logger.info("worker_id=%s queue=%s drained partition(s) %s forgotten", worker_id, new.queue,
                        ",".join(forgotten))
