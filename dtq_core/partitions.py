"""Queue partitions (docs/keyspace.md): which tags a queue's partitions have, and how new tags are
chosen so that, on Redis Cluster, partitions spread evenly over the masters.

The registry is one global hash (Keys.queues(): queue -> Layout JSON), written only by
registerQueue-1 (a new queue, under DTQ_MAX_QUEUES) and by the leader's reconcile (a changed
DTQ_QUEUE_PARTITIONS). A partition's own keys carry its owner (Keys.owner(tag): "queue|epoch"),
which every script that adds work checks, so a submitter holding a stale copy of a deleted or
re-created queue's layout is refused (code PARTITION_CLOSED) and reads the registry again.

Pure logic only: the Redis calls live with their callers (engine/registry.py, worker/store.py).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import secrets
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

from redis.crc import key_slot

TAG_LENGTH = 6
MAX_TAG_TRIES = 20_000  # on a cluster, candidates tried to land a tag on a chosen master
_round_robin = itertools.count()


@dataclass(frozen=True, slots=True)
class Layout:
    """One queue's partitions. tags: where submits go (index = partition number). draining:
    partitions dropped by a lower DTQ_QUEUE_PARTITIONS, still read by workers until they are
    empty, then forgotten. epoch: changes each time the queue is registered anew (after a delete),
    so a stale submitter cannot write into a partition of the queue's previous life."""

    queue: str
    tags: tuple[str, ...]
    draining: tuple[str, ...] = ()
    epoch: str = field(default_factory=lambda: secrets.token_hex(4))

    @property
    def all_tags(self) -> tuple[str, ...]:
        """Every partition workers read: serving, then draining."""
        return self.tags + self.draining

    @property
    def owner(self) -> str:
        """The value of each partition's owner key (Keys.owner)."""
        return f"{self.queue}|{self.epoch}"

    def tag_for(self, idempotency_key: str | None = None) -> str:
        """The partition a submit goes to: fixed by its idempotency key (so a retry finds the first
        task), otherwise round robin."""
        if len(self.tags) == 1:
            return self.tags[0]
        if idempotency_key:
            return self.tags[zlib.crc32(idempotency_key.encode()) % len(self.tags)]
        return self.tags[next(_round_robin) % len(self.tags)]

    def to_json(self) -> str:
        return json.dumps({"tags": list(self.tags), "draining": list(self.draining), "epoch": self.epoch},
                          separators=(",", ":"))

    @classmethod
    def from_json(cls, queue: str, raw: str) -> Layout:
        data = json.loads(raw)
        return cls(queue=queue, tags=tuple(data["tags"]), draining=tuple(data.get("draining", ())),
                   epoch=str(data.get("epoch", "")))


def parse_registry(raw: dict[str, str]) -> dict[str, Layout]:
    """The registry hash as layouts; an entry that does not parse (written by hand) is skipped."""
    layouts = {}
    for queue, value in raw.items():
        try:
            layouts[queue] = Layout.from_json(queue, value)
        except (ValueError, KeyError, TypeError):
            continue
    return layouts


def candidate_tags(queue: str, index: int) -> Iterator[str]:
    """Tags for partition `index` of `queue`, in the order they are tried: deterministic, so on
    one node the same queue always gets the same tags."""
    for attempt in itertools.count():
        digest = hashlib.sha1(f"{queue}/{index}/{attempt}".encode()).digest()
        yield base64.b32encode(digest).decode()[:TAG_LENGTH].lower()


def slot_of(tag: str) -> int:
    return int(key_slot(tag.encode()))


def choose_tags(queue: str, first_index: int, count: int, taken: Iterable[str], *,
                master_of_slot: Callable[[int], str] | None = None, masters: Iterable[str] = ()) -> list[str]:
    """Tags for partitions first_index .. first_index + count - 1 of `queue`.

    taken: every tag already in the registry (of any queue). On a cluster (master_of_slot given),
    each new partition goes to the master that holds the fewest partitions so far, so queues
    and a partitioned queue's partitions spread evenly; on one node the first free candidate.
    """
    used = set(taken)
    load: Counter[str] = Counter({m: 0 for m in masters})
    if master_of_slot is not None:
        for tag in used:
            load[master_of_slot(slot_of(tag))] += 1
    chosen: list[str] = []
    for index in range(first_index, first_index + count):
        candidates = candidate_tags(queue, index)
        target = min(sorted(load), key=lambda m: load[m]) if master_of_slot is not None and load else None
        pick = None
        for tag in itertools.islice(candidates, MAX_TAG_TRIES):
            if tag in used:
                continue
            if target is None or master_of_slot is None or master_of_slot(slot_of(tag)) == target:
                pick = tag
                break
        if pick is None:  # no candidate landed there (a master with very few slots): any free one
            pick = next(t for t in candidate_tags(queue, index) if t not in used)
        used.add(pick)
        chosen.append(pick)
        if master_of_slot is not None:
            load[master_of_slot(slot_of(pick))] += 1
    return chosen
