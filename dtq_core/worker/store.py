"""The worker's Redis calls (asyncio): the partitions it serves, fetch-and-claim, completion,
heartbeats, reclaim, and the scheduler's leader lock and promotion. Each is one script or one
pipeline per partition, the partitions of a call pipelined together.

Fetch and completion, the calls made for every batch of tasks, go over hot-path Lines (hotpath.py,
wire.py): one for the consumer's fetches, one for completions, so neither waits for the other.
Every partition script is routed by its KEYS[1], the partition's key prefix (Keys.partition).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
from redis.exceptions import RedisError
from redis.typing import EncodableT, FieldT

from .. import faults
from ..clock import Clock, iso
from ..config import DtqConfig
from ..engine.registry import fold_stats
from ..errors import ErrorCode
from ..events import EventsGate
from ..keys import PRIORITIES, Keys
from ..partitions import Layout, choose_tags, parse_registry
from ..replication import Replication
from ..replies import text_list
from ..routing import Routed, is_cluster
from ..scripts import Scripts
from ..wire import pack
from .executor import Completion, Row
from .fairness import share
from .hotpath import Call, HotPath
from .samples import LATE_SAMPLE_MINUTES, Samples

COMPLETE_BATCH = 500
WAKE_SELF_TTL_MS = 60_000  # a push to a worker's own wake list outlives no wait by much
REWAITS = 5  # times a worker asks replicas again for completions they did not confirm
logger = logging.getLogger("dtq.worker")

TYPES_REFRESH_MS = 600_000  # a long-running worker re-registers its task types this often


def stream_suffix(stream: str) -> str:
    """A partition stream's name after the partition's stream key prefix ("queue:priority"), as
    the partition scripts take it (neither queue names nor priorities have a ':')."""
    head, _, priority = stream.rpartition(":")
    return f"{head.rpartition(':')[2]}:{priority}"


@dataclass(frozen=True, slots=True)
class Partition:
    """One partition a worker serves: its tag, its queue, and the owner its layout gives it."""

    tag: str
    queue: str
    owner: str
    # Its streams after the partition's stream key prefix, in the order a fetch serves them.
    streams: tuple[str, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "streams", tuple(f"{self.queue}:{p}" for p in PRIORITIES))

    @classmethod
    def all_of(cls, layout: Layout) -> list[Partition]:
        return [cls(tag, layout.queue, layout.owner) for tag in layout.all_tags]


@dataclass(slots=True)
class Fetched:
    """What one fetch round brought: rows to run, the partitions whose ready flag the fetch cleared,
    and the partitions whose call failed (with the error), for the caller's ready set."""

    rows: list[Row] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    failed: dict[str, Exception] = field(default_factory=dict)
    # Partitions whose limits let nothing start, with the seconds until a token frees (issue 22).
    waits: dict[str, float] = field(default_factory=dict)
    token: bool = False  # wait_and_fetch: its wait ended on a ring's token (not its own push, not the time)
    # Partitions whose limits count starts in a time window (rate, group_rate): claimed no more
    # than the fetch said could start at once.
    rated: set[str] = field(default_factory=set)


def _count_arg(count: int, now: int) -> int | str:
    """fetchTasks' ARGV[8]: the count, with how many of it can start at once when fewer."""
    return count if now >= count else f"{count}:{max(0, now)}"


class WorkerStore:
    def __init__(self, config: DtqConfig, client: aioredis.Redis, clock: Clock, worker_id: str, *,
                 timeout_s: float = 10.0) -> None:
        self.config = config
        self.client = client
        self.clock = clock
        self.keys = Keys(config.key_prefix)
        self.worker_id = worker_id
        self.scripts = Scripts(client)
        self.replication = Replication.of(config)  # what completions wait for (replication.py)
        self.deleted_seen = 0  # idle pending entries the reclaim found deleted (for the log)
        self.timeout_s = timeout_s  # for one hot-path exchange
        self._controls_cleared = False
        self.fetch_path = HotPath(client, timeout_s=timeout_s)  # the consumer's fetches
        self.complete_path = HotPath(client, timeout_s=timeout_s)  # completions, written while it fetches
        self.served_types: list[str] = []  # registered at start, refreshed by heartbeats
        self._types_at = 0  # when they were last registered (ms)
        self._reclaim_offset = 0  # rotates the reaper's shares (fairness.share)
        self.events = EventsGate(config, self.keys)  # the hot-path scripts' events argument
        self.samples = Samples(worker_id)  # the completions' statistics samples, written by write_samples

    async def aclose(self) -> None:
        try:
            await self.fetch_path.close()
            await self.complete_path.close()
        finally:
            await self.client.aclose()

    # -- queues and their partitions -----------------------------------------------------------
    async def layouts_and_paused(self) -> tuple[dict[str, Layout], set[str]]:
        """Every registered queue's layout, and the paused queues (one pipeline)."""
        pipe = self.client.pipeline(transaction=False)
        pipe.hgetall(self.keys.queues())
        pipe.hkeys(self.keys.paused_index())
        registry, paused = await pipe.execute()
        return parse_registry(registry), set(paused)

    async def ensure_queues(self, queues: Sequence[str]) -> dict[str, Layout]:
        """Register the queues that are not (outside DTQ_MAX_QUEUES: a worker started with --queues
        serves them whatever submits did) and open every partition of each (idempotent: the owner
        key and the streams' consumer groups, from id 0 so nothing is skipped). Their layouts."""
        layouts, _ = await self.layouts_and_paused()
        taken = {tag for layout in layouts.values() for tag in layout.all_tags}
        master_of_slot, masters = self._slot_map()
        for queue in queues:
            if queue in layouts:
                continue
            tags = choose_tags(queue, 0, self.config.partitions_of(queue), taken, master_of_slot=master_of_slot,
                               masters=masters)
            proposed = Layout(queue=queue, tags=tuple(tags))
            _, raw = await self.scripts("registerQueue", keys=[self.keys.queues()],
                                        args=[queue, proposed.to_json(), 0])
            layouts[queue] = Layout.from_json(queue, raw)
            taken.update(layouts[queue].all_tags)
        pipe = self.client.pipeline(transaction=False)
        opened = [(layouts[q], tag) for q in queues for tag in layouts[q].all_tags]
        for layout, tag in opened:
            await self.scripts("openPartition", keys=[self.keys.partition(tag)],
                               args=[layout.owner, layout.queue, Keys.GROUP], client=pipe)
        for reply, (layout, tag) in zip(await self.scripts.aexecute(pipe), opened, strict=True):
            if int(reply) == ErrorCode.PARTITION_CLOSED:  # deleted meanwhile: the next refresh sees it
                logger.warning("worker_id=%s partition %s of queue %s is closed (the queue was deleted "
                               "meanwhile)", self.worker_id, tag, layout.queue)
        return {q: layouts[q] for q in queues}

    def _slot_map(self) -> tuple[Callable[[int], str] | None, list[str]]:
        """(slot -> master name, master names) on Redis Cluster, so that new partitions spread over
        the masters as the engine's registry spreads them; (None, []) on one node."""
        client = self.client
        if not isinstance(client, aiocluster.RedisCluster):
            return None, []
        nodes = client.nodes_manager
        return (lambda slot: str(nodes.get_node_from_slot(slot).name)), sorted(n.name for n in client.get_primaries())

    # -- claim --------------------------------------------------------------------------------
    def _claim_args(self) -> list[object]:
        """The claim context (includes/claim.lua, claim_context)."""
        now = self.clock.now_ms()
        c = self.config
        return [Keys.GROUP, self.worker_id, now, iso(now), c.retention_arg, 1 if c.dlq_enabled else 0,
                c.dlq_maxlen]

    async def fetch(self, asks: Sequence[tuple[Partition, int]], now: Mapping[str, int] | None = None) -> Fetched:
        """Read and claim up to `count` new entries of each partition asked (non-blocking), highest
        priority first within each: one fetchTasks call per partition, all pipelined (one write
        per node). A paused partition gives nothing. now: of each partition's count, how many can
        start at once (absent: all), the most a rate-limited one claims (fetchTasks-1.lua)."""
        asks = [(p, n) for p, n in asks if n > 0]
        if not asks:
            return Fetched()
        claim = self._claim_args()
        events = await self.events.aflag(self.client)
        now = now or {}
        calls = [Call.of(self.scripts, "fetchTasks", keys=[self.keys.partition(p.tag)],
                         args=[*claim, _count_arg(count, now.get(p.tag, count)), p.owner, events, *p.streams])
                 for p, count in asks]
        return self._fetched(asks, await self.fetch_path.exchange(calls))

    async def wait_and_fetch(self, partition: Partition, count: int, block_s: float, now: int | None = None) -> Fetched:
        """Wait up to block_s for a token on the partition's wake list (or on this worker's own,
        wake_self), then fetch as `fetch` does: the BLPOP and the fetchTasks call go out in one
        write on the consumer's line, so Redis runs the fetch as soon as the wait ends, in the
        round trip that woke it. The fetch runs whatever ended the wait (a token, this worker's
        own push, the timeout), and takes Redis's clock: it runs up to block_s after the call."""
        tag = partition.tag
        wake_list = self.keys.wake_list(tag)
        blpop = pack(("BLPOP", wake_list, self.keys.wake_self(tag, self.worker_id), max(block_s, 0.01)))
        claim = self._claim_args()
        claim[2:4] = ["", ""]  # now (ms, ISO): Redis's clock when the fetch runs
        events = await self.events.aflag(self.client)
        call = Call.of(self.scripts, "fetchTasks", keys=[self.keys.partition(tag)],
                       args=[*claim, _count_arg(count, count if now is None else now), partition.owner, events,
                             *partition.streams])
        replies = await self.fetch_path.exchange([call], head=[(wake_list, blpop)], wait_s=block_s)
        popped = replies[0]
        if isinstance(popped, Exception):  # the wake list is not a list (overwritten by hand)
            raise popped
        fetched = self._fetched([(partition, count)], replies[1:])
        fetched.token = bool(popped) and str(popped[0]) == wake_list
        return fetched

    async def unblock(self, partition: Partition) -> None:
        """End this worker's BLPOP on the partition's wake list now (wait_and_fetch): a push to its
        own list, which expires if the wait had ended already and no later wait takes it."""
        key = self.keys.wake_self(partition.tag, self.worker_id)
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, 1)
        pipe.pexpire(key, WAKE_SELF_TTL_MS)
        await pipe.execute()

    def _fetched(self, asks: Sequence[tuple[Partition, int]], replies: list[Any]) -> Fetched:
        fetched = Fetched()
        received_at = self.clock.monotonic()
        for (partition, _), reply in zip(asks, replies, strict=True):
            if isinstance(reply, Exception):
                fetched.failed[partition.tag] = reply
                continue
            drained, rows = reply[0], reply[1]
            claimed_at = received_at
            if len(reply) > 3 and int(reply[3]):  # claimed on Redis's clock (wait_and_fetch): as old as that says
                claimed_at -= max(0.0, (self.clock.now_ms() - int(reply[3])) / 1000)
            if len(reply) > 4 and int(reply[4]):
                fetched.rated.add(partition.tag)
            fetched.rows += self._runnable(rows, partition.tag, claimed_at)
            if int(drained):
                fetched.drained.append(partition.tag)
            if len(reply) > 2 and int(reply[2]) > 0:
                fetched.waits[partition.tag] = int(reply[2]) / 1000
        if fetched.failed and len(fetched.failed) == len(asks):
            raise next(iter(fetched.failed.values()))  # nothing answered: the caller backs off
        return fetched

    def _runnable(self, reply: list[Any], tag: str, received_at: float) -> list[Row]:
        """Keep the rows to run; log, once each, the entries the claim script settled itself."""
        rows: list[Row] = []
        for r in reply:
            if r[0] == "run":
                rows.append(Row.from_reply(r, received_at, tag))
                continue
            if len(r) < 5:  # held back by its group's limits (parked, deferred): nothing to log
                continue
            outcome, entry_id, stream, task_id, reason = r[:5]
            if outcome == "absorbed":
                logger.info("task_id=%s worker_id=%s duplicate entry %s on %s absorbed: %s", task_id,
                            self.worker_id, entry_id, stream, reason)
            elif outcome == "quarantined":
                logger.error("task_id=%s worker_id=%s quarantined as dtq.CorruptRecord (entry %s on %s): %s", task_id,
                             self.worker_id, entry_id, stream, reason)
            elif outcome == "dead":
                logger.warning("task_id=%s worker_id=%s moved to the DLQ (or FAILED when it is off): dtq.WorkerLost: "
                               "%s and no attempt is left", task_id, self.worker_id, reason)
            else:
                logger.info("task_id=%s worker_id=%s %s: %s and a cancel was requested", task_id, self.worker_id,
                            outcome, reason)
        return rows

    # -- reclaim --------------------------------------------------------------------------------
    async def in_flight(self, tags: Sequence[str]) -> list[str]:
        """The tags among `tags` whose running index is not empty: where an entry a worker claimed
        and has not acknowledged can be (one pipeline)."""
        if not tags:
            return []
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            pipe.zcard(self.keys.running(tag))
        return [tag for tag, n in zip(tags, await pipe.execute(raise_on_error=False), strict=True)
                if isinstance(n, int) and n > 0]

    async def silent_workers_partitions(self) -> set[str]:
        """The partitions where workers silent past the visibility timeout held entries at their
        last heartbeat (the `partitions` field of their registration)."""
        cutoff = self.clock.now_ms() - int(self.config.visibility_timeout_s * 1000)
        silent = [w for w in text_list(await self.client.zrangebyscore(self.keys.workers(), "-inf", cutoff))
                  if w != self.worker_id]
        if not silent:
            return set()
        pipe = self.client.pipeline(transaction=False)
        for worker_id in silent:
            pipe.hget(self.keys.worker(worker_id), "partitions")
        return {tag for value in await pipe.execute() if value for tag in str(value).split(",") if tag}

    async def reclaim(self, partitions: Sequence[Partition], count: int, ours: Container[str] = (),
                      trusted: Callable[[float], bool] = lambda took_s: True) -> list[Row]:
        """Take up to `count` entries idle past the visibility timeout in the given partitions
        (highest priority first within each) and claim them with the increment.

        1. One pipeline looks for an idle entry in each stream (XPENDING IDLE, read only): an idle
           round costs one round trip, whatever the number of partitions.
        2. takeIdleEntries in the partitions that have one, `count` shared among them (one
           pipeline), then claimEntries in those that gave entries (one pipeline).
        Entries deleted from the stream while pending leave the PEL; their tasks stay RUNNING until
        the leader's lost-task sweep requeues them.
        `ours`: entry ids this worker is still running or completing. One of them idle that long
        means its heartbeat ran late (a blocked event loop), not that it died: the take has just
        refreshed it, and it is not run again.
        `trusted(seconds the take took)`: False when Redis stalled while the take was in flight
        (or heartbeats are late): the idle times it judged by grew for every owner alike, so the
        entries go back to the owners their task records name, for those to refresh.
        """
        if count <= 0 or not partitions:
            return []
        min_idle = int(self.config.visibility_timeout_s * 1000)
        idle = await self._with_idle_entries(partitions, min_idle)
        if not idle:
            return []
        shares = share(count, [p.tag for p in idle], self._reclaim_offset)
        self._reclaim_offset += count % len(idle)
        by_tag = {p.tag: p for p in idle}
        started = self.clock.monotonic()
        pipe = self.client.pipeline(transaction=False)
        for tag, n in shares:
            await self.scripts("takeIdleEntries", keys=[self.keys.partition(tag)],
                               args=[Keys.GROUP, self.worker_id, min_idle, n, *by_tag[tag].streams], client=pipe)
        takes = await self.scripts.aexecute(pipe)
        taken_by_tag: dict[str, list[Any]] = {}
        for (tag, _), (deleted, taken) in zip(shares, takes, strict=True):
            self.deleted_seen += int(deleted)
            if taken:
                taken_by_tag[tag] = taken
        if not taken_by_tag:
            return []
        if not trusted(self.clock.monotonic() - started):
            await self._give_back([(stream, entry_id, task_id) for taken in taken_by_tag.values()
                                   for stream, entry_id, task_id, *_ in taken if entry_id not in ours])
            return []
        claims: list[tuple[str, list[object]]] = []
        for tag, taken in taken_by_tag.items():
            quads: list[object] = []
            for stream, entry_id, task_id, attempt, _owner in taken:
                if entry_id in ours:
                    logger.warning("task_id=%s worker_id=%s entry %s went idle past the visibility timeout while "
                                   "running here (late heartbeat: a blocked event loop?); a peer could have taken it",
                                   task_id, self.worker_id, entry_id)
                    continue
                quads += [stream_suffix(stream), entry_id, task_id, attempt]
            if quads:
                claims.append((tag, quads))
        if not claims:
            return []
        pipe = self.client.pipeline(transaction=False)
        claim = self._claim_args()
        for tag, quads in claims:
            await self.scripts("claimEntries", keys=[self.keys.partition(tag)], args=[*claim, *quads], client=pipe)
        received_at = self.clock.monotonic()
        rows: list[Row] = []
        for (tag, _), reply in zip(claims, await self.scripts.aexecute(pipe), strict=True):
            rows += self._runnable(reply, tag, received_at)
        return rows

    async def _with_idle_entries(self, partitions: Sequence[Partition], min_idle: int) -> list[Partition]:
        """The partitions with an entry idle for at least min_idle ms in one of their streams."""
        pipe = self.client.pipeline(transaction=False)
        for p in partitions:
            for priority in PRIORITIES:
                pipe.xpending_range(self.keys.stream(p.tag, p.queue, priority), Keys.GROUP, "-", "+", 1,
                                    idle=min_idle)
        replies = await pipe.execute(raise_on_error=False)  # a stream or group that is gone: nothing idle
        n = len(PRIORITIES)
        return [p for i, p in enumerate(partitions)
                if any(isinstance(r, list) and r for r in replies[i * n:(i + 1) * n])]

    async def _give_back(self, entries: Sequence[tuple[str, str, str]]) -> None:
        """Hand entries (stream, entry id, task id) just taken back to the workers their RUNNING
        tasks name."""
        if not entries:
            return
        pipe = self.client.pipeline(transaction=False)
        for _, _, task_id in entries:
            pipe.hmget(self.keys.task(task_id), "status", "worker_id", "entry_id")
        owners = await pipe.execute()
        pipe = self.client.pipeline(transaction=False)
        returned = 0
        for (stream, entry_id, _), (status, owner, task_entry) in zip(entries, owners, strict=True):
            if status == "RUNNING" and owner and owner != self.worker_id and task_entry == entry_id:
                pipe.xclaim(stream, Keys.GROUP, owner, 0, [entry_id], justid=True)
                returned += 1
        if returned:
            await pipe.execute()
        logger.warning("worker_id=%s Redis stalled while reclaiming: %d entr(ies) handed back to their owners, "
                       "%d left for a later round", self.worker_id, returned, len(entries) - returned)

    async def release(self, rows: Sequence[Row]) -> int:
        """Hand the entries of attempts that stopped unfinished to peers (releaseEntries, one per
        partition, pipelined)."""
        if not rows:
            return 0
        idle_ms = int(self.config.visibility_timeout_s * 1000)
        pipe = self.client.pipeline(transaction=False)
        for tag, group in _by_tag(rows).items():
            pairs = [part for row in group for part in (stream_suffix(row.stream), row.entry_id)]
            await self.scripts("releaseEntries", keys=[self.keys.partition(tag)],
                               args=[Keys.GROUP, self.worker_id, idle_ms, *pairs], client=pipe)
        return sum(int(n) for n in await self.scripts.aexecute(pipe))

    async def pause_partitions(self, tags: Sequence[str], until_ms: int) -> None:
        """Start nothing in these partitions before until_ms (pauseLimits, one per partition,
        pipelined): a handler's RateLimited(scope="queue") reaches every partition of its queue."""
        if not tags:
            return
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            await self.scripts("pauseLimits", keys=[self.keys.partition(tag)], args=[until_ms], client=pipe)
        await self.scripts.aexecute(pipe)

    async def return_unstarted(self, rows: Sequence[Row]) -> int:
        """Put claims this worker made but never started back in their streams, uncharged
        (returnEntries, one per partition, pipelined); the number put back."""
        if not rows:
            return 0
        now = self.clock.now_ms()
        pipe = self.client.pipeline(transaction=False)
        for tag, group in _by_tag(rows).items():
            quads = [part for row in group
                     for part in (stream_suffix(row.stream), row.entry_id, row.task_id, str(row.attempt))]
            await self.scripts("returnEntries", keys=[self.keys.partition(tag)],
                               args=[Keys.GROUP, self.worker_id, now, iso(now), self.config.retention_arg, *quads],
                               client=pipe)
        return sum(int(n) for n in await self.scripts.aexecute(pipe))

    # -- complete -----------------------------------------------------------------------------
    def _complete_calls(self, completions: Sequence[Completion], events: int, now: int
                        ) -> tuple[list[Call], list[list[int]]]:
        """completeTasks calls, one per partition (per COMPLETE_BATCH of it): completions grouped
        by the tag of their task ids; and, for each call, the indexes of its completions. The
        calls return their statistics' samples (ARGV[10]) for complete() to keep."""
        c = self.config
        by_tag: dict[str, list[int]] = {}
        for i, completion in enumerate(completions):
            by_tag.setdefault(completion.row.partition_tag, []).append(i)
        head = [Keys.GROUP, now, iso(now), c.retention_arg, c.result_retention_s * 1000,
                1 if c.dlq_enabled else 0, c.dlq_maxlen]
        calls, groups = [], []
        for tag, indexes in by_tag.items():
            for start in range(0, len(indexes), COMPLETE_BATCH):
                batch = indexes[start:start + COMPLETE_BATCH]
                records = []
                for i in batch:
                    record = completions[i].record()
                    record[3] = stream_suffix(record[3])  # the script adds its partition's prefix
                    records.append(record)
                calls.append(Call.of(self.scripts, "completeTasks", keys=[self.keys.partition(tag)],
                                     args=[*head, json.dumps(records), events, 1]))
                groups.append(batch)
        return calls, groups

    async def complete(self, completions: Sequence[Completion]) -> list[Any]:
        """Write completions, on a line of their own: the consumer's may be busy fetching.

        One status per completion, in their order, as completeTasks returns them: the new status,
        "fenced", "resent", or ["quarantined", new status, reason].
        """
        if not completions:
            return []
        now = self.clock.now_ms()
        calls, groups = self._complete_calls(completions, await self.events.aflag(self.client), now)
        wait = self._waits(calls)  # DTQ_REDIS_MIN_REPLICAS
        replies = await self.complete_path.exchange(calls, wait, self.replication.wait_s)
        acked = _fewest(replies[len(calls):])
        statuses: list[Any] = [None] * len(completions)
        failed = None
        for indexes, reply in zip(groups, replies[:len(calls)], strict=True):
            if isinstance(reply, Exception):
                failed = failed or reply
                continue
            *batch_statuses, samples = reply
            for i, status in zip(indexes, batch_statuses, strict=True):
                statuses[i] = status
            # Kept even when another call failed: sent again, these records come back "resent",
            # which carries no samples.
            self.samples.add(completions[indexes[0]].row.partition_tag, now // 60000, samples)
        if failed is not None:
            raise failed  # all are sent again: a record applied already comes back "resent"
        if wait:
            await self._until_replicated(calls, acked, len(completions))
        return statuses

    async def write_samples(self) -> int:
        """Write the completions' statistics samples gathered since the last write: one
        flushStats call per partition, sent together on the completions' line (worker/samples.py).
        A write not answered is sent again, unchanged, by the next call, ahead of the partition's
        newer samples (a drain calls until none is left: write_all_samples). With
        DTQ_REDIS_MIN_REPLICAS a WAIT follows the writes, as it follows completions; a shortfall
        is logged and the writes stand (they are on the master), and the next write's WAIT, on the
        same line, waits for them again. Returns the number of partitions written."""
        writes = self.samples.writes()
        if not writes:
            return 0
        calls = [Call.of(self.scripts, "flushStats", keys=[self.keys.partition(tag)],
                         args=[payload, self.samples.writer, number]) for tag, number, payload in writes]
        wait = self._waits(calls)
        replies = await self.complete_path.exchange(calls, wait, self.replication.wait_s)
        if wait and not self.replication.enough(acked := _fewest(replies[len(calls):])):
            logger.warning("worker_id=%s statistics samples of %d partition(s) not confirmed by %d replica(s) "
                           "within %d ms (WAIT answered %s): a failover now could lose them; the next write "
                           "waits for them again", self.worker_id, len(writes), self.replication.replicas,
                           self.replication.timeout_ms, acked)
        failed = None
        late_before = self.clock.now_ms() // 60000 - LATE_SAMPLE_MINUTES
        late: list[str] = []
        for (tag, number, _payload), reply in zip(writes, replies[:len(calls)], strict=True):
            if isinstance(reply, Exception):
                failed = failed or reply
                continue
            if isinstance(reply, list):  # a part could not be written; the rest was, once
                error = reply[-1].decode() if isinstance(reply[-1], bytes) else reply[-1]
                logger.warning("worker_id=%s statistics samples of partition %s written in part (%s); the rest "
                               "is left out", self.worker_id, tag, error)
            late += [f"{minute}:{self.samples.writer}:{number}"
                     for minute in self.samples.answered(tag, number) if minute < late_before]
        if late:
            await self._mark_late(late)
        if failed is not None:
            raise failed
        return len(writes)

    async def _mark_late(self, marks: list[str]) -> None:
        """Tell the leader's roll-up about minutes written after it stopped recomputing them
        (samples held while Redis could not be reached, or a stopped worker): it rolls them up and
        folds their hours again (worker/history.py). Each mark names its write, so a leader that
        removes the marks it handled never removes a newer write's. Lost, the mark costs only the
        all-queues and per-type charts these samples (the queue's own series has them)."""
        try:
            await self.client.sadd(self.keys.history_late(), *marks)
        except RedisError as exc:
            logger.warning("worker_id=%s late statistics samples not announced to the history roll-up (%s: %s); "
                           "the all-queues charts miss them", self.worker_id, type(exc).__name__, exc)

    async def write_all_samples(self, rounds: int = 3) -> None:
        """Write every sample before the worker stops: a partition's write sent again goes
        first, its newer samples in the next round (a few rounds at most: the drain is bounded)."""
        for _ in range(rounds):
            if not self.samples or not await self.write_samples():
                return

    def _waits(self, calls: Sequence[Call]) -> list[Routed]:
        """The WAITs that follow completions (none with DTQ_REDIS_MIN_REPLICAS=0): one on one node;
        on a cluster, one behind each partition's calls, on the connection to its master."""
        commands = self.replication.commands()
        if not commands:
            return []
        keys = dict.fromkeys(c.key for c in calls) if is_cluster(self.client) else [calls[0].key]
        return [(key, command) for key in keys for command in commands]

    async def _until_replicated(self, calls: list[Call], acked: object, count: int) -> None:
        """Ask again while fewer replicas than DTQ_REDIS_MIN_REPLICAS confirm the completions.

        Nobody waits for a 503 here, so the worker warns and asks again, a few times with backoff.
        It sends the completions again with the WAIT, not the WAIT alone: a WAIT counts only the
        writes of its own connection, which may be a new one by now, and a completion already
        recorded answers "resent" without changing anything. Still short after that, the worker
        goes on (an ERROR line): the tasks are done on the master, and if a failover loses that,
        they run again (at-least-once), while a worker stuck here could not even drain.
        """
        wait = self._waits(calls)
        for attempt in range(1, REWAITS + 1):
            if self.replication.enough(acked):
                return
            logger.warning("worker_id=%s completions of %d task(s) not confirmed by %d replica(s) within %d ms "
                           "(WAIT answered %s): sending them again with the WAIT (%d of %d)", self.worker_id, count,
                           self.replication.replicas, self.replication.timeout_ms, acked, attempt, REWAITS)
            await asyncio.sleep(min(0.1 * 2 ** attempt, 2.0))
            replies = await self.complete_path.exchange(calls, wait, self.replication.wait_s)
            acked = _fewest(replies[len(calls):])
        if not self.replication.enough(acked):
            logger.error("worker_id=%s completions of %d task(s) still not confirmed by %d replica(s) (WAIT answered "
                         "%s): going on; a failover now could lose them, and those tasks would run again",
                         self.worker_id, count, self.replication.replicas, acked)

    async def claim_still_ours(self, row: Row) -> bool:
        """Whether the task still runs this attempt under this entry and this worker, with no cancel
        requested (a cancelled claim must not start)."""
        status, attempt, entry_id, worker_id, cancel_requested = await self.client.hmget(
            self.keys.task(row.task_id), ["status", "attempt", "entry_id", "worker_id", "cancel_requested"])
        return (status == "RUNNING" and attempt == str(row.attempt) and entry_id == row.entry_id
                and worker_id == self.worker_id and cancel_requested != "1")

    async def cancel_flags(self, task_ids: Sequence[str]) -> list[bool]:
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(self.keys.task(task_id), "cancel_requested")
        return [flag == "1" for flag in await pipe.execute()]

    async def due_soon(self, tags: Sequence[str], horizon_ms: int) -> bool:
        """Whether any of the partitions has scheduled work due by horizon_ms, or schedule entries
        the leader has claimed and not yet queued (one pipeline)."""
        if not tags:
            return False
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            pipe.zcount(self.keys.schedule(tag), "-inf", horizon_ms)
            pipe.zcard(self.keys.schedule_claims(tag))  # due work between the scheduler's two scripts
        return any(int(n) for n in await pipe.execute())

    # -- registry and heartbeat ---------------------------------------------------------------
    async def live_worker_age_s(self, worker_id: str) -> float | None:
        score = await self.client.zscore(self.keys.workers(), worker_id)
        return None if score is None else (self.clock.now_ms() - score) / 1000

    async def heartbeat(self, info: dict[str, Any], rows: Sequence[Row]) -> str | None:
        """Record liveness and refresh the idle time of our in-flight entries (touchEntries, one per
        partition), in one round trip; returns what an operator told this worker (quiet, stop:
        controlWorker-1.lua), or None."""
        now = self.clock.now_ms()
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(k.workers(), {self.worker_id: now})
        # Copied, not unpacked into a literal: redis-py's mapping type takes no dict[str, ...].
        fields: dict[FieldT, EncodableT] = dict(info.items())
        fields.update({"heartbeat_at": now, "hostname": socket.gethostname(), "pid": os.getpid()})
        pipe.hset(k.worker(self.worker_id), mapping=fields)
        pipe.pexpire(k.worker(self.worker_id), int(self.config.worker_record_ttl_s * 1000))
        if not self._controls_cleared:
            # A control left in the record by a previous run under this worker id is not ours.
            pipe.hdel(k.worker(self.worker_id), "control", "control_by", "control_at")
            self._controls_cleared = True
        control_at = len(pipe)
        pipe.hget(k.worker(self.worker_id), "control")
        if self.served_types and now - self._types_at >= TYPES_REFRESH_MS:
            await self._register_types(pipe, now)
        for tag, group in _by_tag(rows).items():
            flat = [part for row in group for part in (stream_suffix(row.stream), row.entry_id, row.task_id)]
            await self.scripts("touchEntries", keys=[k.partition(tag)], args=[Keys.GROUP, self.worker_id, now, *flat],
                               client=pipe)
        replies = await self.scripts.aexecute(pipe)
        control = replies[control_at]
        return control.decode() if isinstance(control, bytes) else control

    async def register_types(self, types: Sequence[str]) -> None:
        """Record the task types this worker serves, so submit accepts them (engine.tasks.check_type)."""
        self.served_types = list(types)
        pipe = self.client.pipeline(transaction=False)
        await self._register_types(pipe, self.clock.now_ms())
        await pipe.execute()

    async def _register_types(self, pipe: Any, now: int) -> None:
        # Forgotten after the task retention without any worker serving them (registerTypes-1.lua).
        await self.scripts("registerTypes", keys=[self.keys.task_types()],
                     args=[now, now - self.config.task_retention_s * 1000, *self.served_types], client=pipe)
        self._types_at = now

    async def deregister(self) -> None:
        pipe = self.client.pipeline(transaction=False)
        pipe.zrem(self.keys.workers(), self.worker_id)
        pipe.delete(self.keys.worker(self.worker_id))
        await pipe.execute()

    async def prune_workers(self, older_than_s: float) -> int:
        """Drop registry rows of workers silent for longer than older_than_s."""
        cutoff = self.clock.now_ms() - int(older_than_s * 1000)
        stale = text_list(await self.client.zrangebyscore(self.keys.workers(), "-inf", cutoff))
        if stale:
            pipe = self.client.pipeline(transaction=False)
            pipe.zrem(self.keys.workers(), *stale)
            pipe.delete(*[self.keys.worker(w) for w in stale])
            await pipe.execute()
        return len(stale)

    # -- scheduler ----------------------------------------------------------------------------
    # The elected leader (worker/leader.py) holds the election key, Keys.leader(), and a lease on
    # every registered partition, Keys.lock(tag), which fences that partition's leader scripts.
    held_leases: frozenset[str] = frozenset()  # partitions whose lease the last round holds
    _renewed_at: int = -(2**62)  # when the last round renewed the election and the leases (ms)

    def _lock_ttl_ms(self) -> int:
        return int(self.config.scheduler_lock_ttl_s * 1000)

    async def take_leadership(self) -> bool:
        """Stand for election: SET NX PX on the election key. True: this worker leads now."""
        elected = bool(await self.client.set(self.keys.leader(), self.worker_id, nx=True, px=self._lock_ttl_ms()))
        if elected:
            self._renewed_at = -(2**62)  # the first round takes every lease
        return elected

    async def lead_round(self, tags: Sequence[str], *, read_registry: bool,
                         periodic_tags: Sequence[str] = ()) -> LeadRound:
        """One pipeline: renew the election, take or renew the lease of every partition in `tags`,
        see which of them have an entry due (and which of periodic_tags, the queues' first
        partitions, a periodic schedule due), and (read_registry) read the partition registry.

        When the election was lost meanwhile, the leases this round renewed or took are handed
        back at once, so the new leader need not wait for them to expire.
        """
        k, ttl, now = self.keys, self._lock_ttl_ms(), self.clock.now_ms()
        # The election and the leases are renewed every third of their TTL (and whenever a
        # partition is new to this leader), not every round: at thousands of partitions that
        # halves an idle leader's commands. The leader scripts check their lease themselves, so
        # a lease lost in between (a long pause) fences them all the same.
        renew = now - self._renewed_at >= ttl / 3 or not set(tags) <= self.held_leases
        pipe = self.client.pipeline(transaction=False)
        if renew:
            await self.scripts("renewLock", keys=[k.leader()], args=[self.worker_id, ttl, 0], client=pipe)
            for tag in tags:
                await self.scripts("renewLock", keys=[k.lock(tag)], args=[self.worker_id, ttl, 1], client=pipe)
        for tag in tags:
            pipe.zrangebyscore(k.schedule(tag), "-inf", now, start=0, num=1)
        for tag in periodic_tags:
            pipe.zrangebyscore(k.periodic_index(tag), "-inf", now, start=0, num=1)
        if read_registry:
            pipe.hgetall(k.queues())
        replies = await self.scripts.aexecute(pipe)
        if renew:
            leader = bool(replies[0])
            leases, replies = replies[1:1 + len(tags)], replies[1 + len(tags):]
            held = tuple(tag for tag, reply in zip(tags, leases, strict=True) if reply)
            self._renewed_at = now
        else:
            leader, held = True, tuple(tag for tag in tags if tag in self.held_leases)
        probes = replies[:len(tags)]
        periodic_probes = replies[len(tags):len(tags) + len(periodic_tags)]
        if not leader:
            await self._release(held)
            held = ()
        self.held_leases = frozenset(held)
        due = tuple(tag for tag, reply in zip(tags, probes, strict=True) if reply and tag in self.held_leases)
        periodic_due = tuple(tag for tag, reply in zip(periodic_tags, periodic_probes, strict=True)
                             if reply and tag in self.held_leases)
        registry = {str(q): str(v) for q, v in replies[-1].items()} if read_registry else None
        return LeadRound(leader=leader, held=held, due=due, registry=registry, periodic_due=periodic_due)

    async def release_lock(self) -> None:
        """Hand back the election and every lease held (on shutdown)."""
        await self._release(sorted(self.held_leases), election=True)
        self.held_leases = frozenset()

    async def _release(self, tags: Sequence[str], *, election: bool = False) -> None:
        if not tags and not election:
            return
        pipe = self.client.pipeline(transaction=False)
        if election:
            await self.scripts("releaseLock", keys=[self.keys.leader()], args=[self.worker_id], client=pipe)
        for tag in tags:
            await self.scripts("releaseLock", keys=[self.keys.lock(tag)], args=[self.worker_id], client=pipe)
        await self.scripts.aexecute(pipe)

    async def _each_partition(self, name: str, tags: Sequence[str], args: Callable[[str], list[object]]
                              ) -> PartitionReplies:
        """Run one leader script on each partition, in one pipeline. A partition whose script
        failed does not hold up the others: the caller raises the first failure after it has
        handled their replies."""
        replies = PartitionReplies()
        if not tags:
            return replies
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            await self.scripts(name, keys=[self.keys.partition(tag)], args=args(tag), client=pipe)
        for tag, reply in zip(tags, await self.scripts.aexecute(pipe, raise_on_error=False), strict=True):
            if isinstance(reply, Exception):
                replies.failure = replies.failure or reply
            else:
                replies.ok[tag] = reply
        return replies

    async def promote_due(self, tags: Sequence[str], limit: int = 500) -> dict[str, int]:
        """Move due schedule entries of these partitions into their streams: claimDue on each,
        then enqueueDue on each that claimed (each step one pipeline). Per partition: how many
        entries it claimed (limit: more may be due), or -1 when its lease was lost meanwhile."""
        now = self.clock.now_ms()
        claimed = await self._each_partition("claimDue", tags, lambda tag: [self.worker_id, now, limit])
        out = {tag: -1 if reply == ErrorCode.LEASE_LOST else len(reply) for tag, reply in claimed.ok.items()}
        ids = {tag: text_list(reply) for tag, reply in claimed.ok.items() if out[tag] > 0}
        if ids:
            faults.reach(self.config.test_fault, "after_claim_due")
            c = self.config
            head: list[object] = [self.worker_id, now, iso(now), c.retention_arg,
                                  1 if c.dlq_enabled else 0, c.dlq_maxlen]
            queued = await self._each_partition("enqueueDue", list(ids), lambda tag: [*head, *ids[tag]])
            for tag, reply in queued.ok.items():
                if reply == ErrorCode.LEASE_LOST:
                    out[tag] = -1
                else:
                    self._log_quarantined(reply[1])
            queued.raise_failure()
        claimed.raise_failure()
        return out

    def _log_quarantined(self, flat: Sequence[str]) -> None:
        """Log each task a leader script quarantined ({task id, reason, ...})."""
        for task_id, reason in zip(flat[::2], flat[1::2], strict=True):
            logger.error("task_id=%s worker_id=%s quarantined as dtq.CorruptRecord: %s", task_id, self.worker_id,
                         reason)

    async def recover_lost_tasks(self, tags: Sequence[str], limit: int = 500) -> dict[str, int]:
        """Requeue RUNNING tasks whose entry vanished and whose owner went silent, in each
        partition: how many per partition, or -1 when its lease was lost."""
        now, c = self.clock.now_ms(), self.config
        cutoff = now - int(c.visibility_timeout_s * 1000)
        # The claim context (includes/claim.lua, claim_context), then the sweep's own arguments.
        args: list[object] = [Keys.GROUP, self.worker_id, now, iso(now), c.retention_arg,
                              1 if c.dlq_enabled else 0, c.dlq_maxlen, cutoff, limit]
        replies = await self._each_partition("recoverLostTasks", tags, lambda tag: args)
        out: dict[str, int] = {}
        for tag, reply in replies.ok.items():
            if reply == ErrorCode.LEASE_LOST:
                out[tag] = -1
                continue
            recovered, quarantined = reply
            self._log_quarantined(quarantined)
            out[tag] = int(recovered)
        replies.raise_failure()
        return out

    async def requeue_stale_claims(self, tags: Sequence[str]) -> dict[str, int]:
        """Return scheduler claims older than DTQ_STALE_CLAIM_S to each partition's schedule: how
        many per partition, or -1 when its lease was lost."""
        now = self.clock.now_ms()
        cutoff = now - int(self.config.stale_claim_s * 1000)
        replies = await self._each_partition("requeueStaleClaims", tags, lambda tag: [cutoff, now, self.worker_id])
        replies.raise_failure()
        return {tag: int(reply) for tag, reply in replies.ok.items()}

    # -- partition reconcile (the leader's; dtq_core/worker/reconcile.py decides) ---------------
    async def read_registry(self) -> dict[str, str]:
        """The partition registry as stored: queue -> layout JSON."""
        return {str(q): str(v) for q, v in (await self.client.hgetall(self.keys.queues())).items()}

    async def slot_map(self) -> tuple[Callable[[int], str] | None, list[str]]:
        """(slot -> master name, master names) on Redis Cluster, for choose_tags; (None, []) else."""
        client: Any = self.client
        if not isinstance(client, aiocluster.RedisCluster):
            return None, []
        if not client.nodes_manager.slots_cache:
            await client.initialize()
        nodes = client.nodes_manager
        masters = sorted(str(node.name) for node in client.get_primaries())
        return (lambda slot: str(nodes.get_node_from_slot(slot).name)), masters

    async def open_partitions(self, layout: Layout, tags: Sequence[str]) -> list[str]:
        """Open partitions for a layout before it is published (openPartition: owner key, consumer
        groups), paused as its first partition is, so a paused queue stays paused in all of them.
        Returns the tags that another layout owns (refused: not opened)."""
        k = self.keys
        paused = await self.client.get(k.paused(layout.tags[0])) if layout.tags else None
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            await self.scripts("openPartition", keys=[k.partition(tag)], args=[layout.owner, layout.queue, Keys.GROUP],
                               client=pipe)
        replies = await self.scripts.aexecute(pipe)
        refused = [tag for tag, reply in zip(tags, replies, strict=True) if int(reply) == ErrorCode.PARTITION_CLOSED]
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            if tag not in refused:
                if paused is None:
                    pipe.delete(k.paused(tag))
                else:
                    pipe.set(k.paused(tag), paused)
        await pipe.execute()
        return refused

    async def close_partitions(self, layout: Layout, tags: Sequence[str]) -> list[str]:
        """Close the partitions of `tags` that hold nothing any more (closePartition) and add the
        statistics each handed over to the global ones; returns the closed. One whose lease this
        worker does not hold is left for a later round."""
        replies = await self._each_partition("closePartition", tags,
                                             lambda tag: [layout.owner, self.worker_id, Keys.GROUP])
        # {1, stats...} closed; a bare code (0, LEASE_LOST, PARTITION_CLOSED) left as it is.
        taken = {tag: reply[1:] for tag, reply in replies.ok.items() if isinstance(reply, list)}
        # Folded before a failure elsewhere is raised: those counts are out of their partitions now.
        pipe = self.client.pipeline(transaction=False)
        fold_stats(pipe, self.keys, list(taken.values()))
        await pipe.execute()
        replies.raise_failure()
        return list(taken)

    async def replace_layout(self, queue: str, read: str, layout: Layout) -> bool:
        """Publish a queue's new layout if the registry still holds the one read (reconcileQueue)."""
        return bool(await self.scripts("reconcileQueue", keys=[self.keys.queues()],
                                       args=[queue, read, layout.to_json()]))


@dataclass(frozen=True, slots=True)
class LeadRound:
    """What one round of the scheduler election found (WorkerStore.lead_round)."""

    leader: bool  # this worker still holds the election
    held: tuple[str, ...]  # partitions whose lease it holds
    due: tuple[str, ...]  # of those, the ones with a schedule entry due now
    registry: dict[str, str] | None  # the partition registry, when the round read it
    periodic_due: tuple[str, ...] = ()  # partitions with a periodic schedule due (worker/periodic.py)


@dataclass(slots=True)
class PartitionReplies:
    """The replies of one leader script run on several partitions (WorkerStore._each_partition)."""

    ok: dict[str, Any] = field(default_factory=dict)  # tag -> reply
    failure: Exception | None = None  # the first partition's error, if any

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure


def _fewest(acks: Sequence[Any]) -> object:
    """The WAIT reply that counts the fewest replicas (an error reply first): what the whole
    batch can be said to have."""
    errors = [a for a in acks if not isinstance(a, int)]
    return errors[0] if errors else min(acks, default=0)


def _by_tag(rows: Iterable[Row]) -> dict[str, list[Row]]:
    groups: dict[str, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.partition_tag, []).append(row)
    return groups
