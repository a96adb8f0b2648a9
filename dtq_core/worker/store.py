"""The worker's Redis calls (asyncio): fetch-and-claim, completion, heartbeats, reclaim, and the
scheduler's leader lock and promotion. Each is one script or one pipeline.

Fetch and completion, the calls made for every batch of tasks, go over hot-path Lines (wire.py):
one for the consumer's fetches and waits, one for completions, so neither waits for the other.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
import redis.asyncio as aioredis
import redis.asyncio.cluster as aiocluster
from redis.typing import EncodableT, FieldT

from .. import faults
from ..clock import Clock, iso
from ..config import DtqConfig
from ..errors import ErrorCode
from ..keys import PRIORITIES, Keys
from ..partitions import Layout
from ..replication import WAIT, Replication
from ..replies import text_list
from ..scripts import SOURCES, Scripts
from ..wire import Line, pack
from .executor import Completion, Row

COMPLETE_BATCH = 500
REWAITS = 5  # times a worker asks replicas again for completions they did not confirm
logger = logging.getLogger("dtq.worker")

TYPES_REFRESH_MS = 600_000  # a long-running worker re-registers its task types this often


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
        self.timeout_s = timeout_s  # for one hot-path exchange, on top of any blocking wait
        self.line = Line(client)  # the consumer's fetches, and their blocking waits
        self.side_line = Line(client)  # completions, written while the consumer waits
        self.served_types: list[str] = []  # registered at start, refreshed by heartbeats
        self._types_at = 0  # when they were last registered (ms)

    async def aclose(self) -> None:
        try:
            await self.line.close()
            await self.side_line.close()
        finally:
            await self.client.aclose()

    # -- queues -------------------------------------------------------------------------------
    async def known_and_paused(self) -> tuple[set[str], set[str]]:
        pipe = self.client.pipeline(transaction=False)
        pipe.smembers(self.keys.queues())
        pipe.smembers(self.keys.paused())
        known, paused = await pipe.execute()
        return set(known), set(paused)

    async def ensure_queues(self, queues: Sequence[str]) -> None:
        """Register queues and create their consumer groups (from id 0, so nothing is skipped), and
        mark them ready: entries added before the ready set existed (or while it was lost) are
        found by the next fetch, which drops the queues it finds empty."""
        pipe = self.client.pipeline(transaction=False)
        if queues:
            pipe.sadd(self.keys.ready(), *queues)
        for queue in queues:
            pipe.sadd(self.keys.queues(), queue)
            for stream in self.keys.streams(queue):
                pipe.xgroup_create(stream, Keys.GROUP, id="0", mkstream=True)
        for reply in await pipe.execute(raise_on_error=False):
            if isinstance(reply, Exception) and "BUSYGROUP" not in str(reply):
                raise reply

    # -- claim --------------------------------------------------------------------------------
    def _claim_args(self, *, late_bound: bool = False) -> list[object]:
        """The claim context; late_bound leaves now to the script (Redis's clock at run time)."""
        now = self.clock.now_ms()
        c = self.config
        return [Keys.GROUP, self.worker_id, "" if late_bound else now, "" if late_bound else iso(now),
                c.task_retention_s * 1000, 1 if c.dlq_enabled else 0, c.dlq_maxlen]

    def _claim_keys(self) -> list[str]:
        k = self.keys
        return [k.paused(), k.events(), k.event_seq(), k.dlq(), k.stats_counters(), k.running(), k.stats_tasks(),
                k.task_prefix()]

    def _fetch_command(self, queues: Sequence[str] | None, count: int, *, late_bound: bool = False) -> bytes:
        k = self.keys
        keys = [*self._claim_keys(), k.ready(), k.wake_any(), k.stream_prefix(), k.wake_prefix()]
        return self.scripts.command("fetchTasks", keys=keys,
                                    args=[*self._claim_args(late_bound=late_bound), count, *(queues or ())])

    async def fetch(self, queues: Sequence[str] | None, count: int) -> list[Row]:
        """Read and claim up to `count` new entries of the given queues (None: every queue) that are
        ready and not paused, highest priority first (non-blocking)."""
        if count <= 0 or queues == []:
            return []
        (reply,) = await self._exchange([("fetchTasks", self._fetch_command(queues, count))], line=self.line)
        if isinstance(reply, Exception):
            raise reply
        return self._runnable(reply)

    def wake_keys(self, queues: Sequence[str] | None) -> list[str]:
        """The wake lists a worker serving these queues (None: every queue) blocks on."""
        return [self.keys.wake_any()] if queues is None else [self.keys.wake(q) for q in queues]

    async def wait_and_fetch(self, queues: Sequence[str] | None, count: int, block_ms: int) -> list[Row]:
        """Wait up to block_ms for a token on the queues' wake list(s), then fetch, in one round trip.

        Redis holds the pipelined fetch script until the BLPOP before it returns, so the wake-up
        and the claim travel together (an XREADGROUP BLOCK would need a second round trip for
        the claim). A stale token only costs an empty fetch. The script runs up to block_ms after
        it was queued, so it reads the time from Redis's clock rather than a stale one of ours.
        """
        wake_keys = self.wake_keys(queues)
        woke, reply = await self._exchange(
            [("", pack(["BLPOP", *wake_keys, f"{block_ms / 1000:g}"])),
             ("fetchTasks", self._fetch_command(queues, count, late_bound=True))],
            line=self.line, wait_s=block_ms / 1000)
        if isinstance(reply, Exception):
            raise reply
        rows = self._runnable(reply)
        if isinstance(woke, redis.exceptions.ResponseError):
            # A wake key that is not a list (written by hand): BLPOP fails at once. Fetching goes
            # on, but without this pause an idle worker would spin on Redis.
            logger.warning("worker_id=%s cannot wait on %s: %s; polling every %d ms instead", self.worker_id,
                           ",".join(wake_keys), woke, block_ms)
            if not rows:
                await asyncio.sleep(block_ms / 1000)
        elif isinstance(woke, Exception):
            raise woke
        return rows

    async def _exchange(self, commands: list[tuple[str, bytes]], *, line: Line, wait_s: float = 0.0) -> list[Any]:
        """Send named commands in one write; a script Redis does not know (restarted, or SCRIPT
        FLUSH) did not run: load it and send that command again on its own (with the WAIT that
        ends the exchange, if one does: it counted replicas before this write). wait_s: how long a
        blocking command among them may wait, on top of the usual timeout."""
        replies = await line.exchange([cmd for _, cmd in commands], wait_s + self.timeout_s)
        wait = [cmd for name, cmd in commands[-1:] if name == WAIT]
        for i, ((name, cmd), reply) in enumerate(zip(commands, replies, strict=True)):
            if isinstance(reply, redis.exceptions.NoScriptError):
                await self.client.script_load(SOURCES[name])
                replies[i], *acked = await line.exchange([cmd, *wait], wait_s + self.timeout_s)
                if acked:
                    replies[-1] = acked[0]
        return replies

    def _runnable(self, reply: list[Any]) -> list[Row]:
        """Keep the rows to run; log, once each, the entries the claim script settled itself."""
        rows: list[Row] = []
        for r in reply:
            if r[0] == "run":
                rows.append(Row.from_reply(r, self.clock.monotonic()))
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

    async def reclaim(self, streams: Sequence[str], count: int, ours: Container[str] = (),
                      trusted: Callable[[float], bool] = lambda took_s: True) -> list[Row]:
        """Take up to `count` entries idle past the visibility timeout, in any of `streams`
        (highest priority first), and claim them with the increment.

        One takeIdleEntries script for every stream: an idle round costs one round trip, and a
        round that finds work one more (claimEntries). Entries deleted from the stream while
        pending leave the PEL; their tasks stay RUNNING until recover_lost_tasks requeues them.
        `ours`: entry ids this worker is still running or completing. One of them idle that long
        means its heartbeat ran late (a blocked event loop), not that it died: the script has just
        refreshed it, and it is not run again.
        `trusted(seconds the take took)`: False when Redis stalled while the call was in flight
        (or heartbeats are late): the idle times it judged by grew for every owner alike, so the
        entries go back to the owners their task records name, for those to refresh.
        """
        if count <= 0 or not streams:
            return []
        min_idle = int(self.config.visibility_timeout_s * 1000)
        started = self.clock.monotonic()
        deleted, taken = await self.scripts("takeIdleEntries", keys=[self.keys.stream_prefix()],
                                            args=[Keys.GROUP, self.worker_id, min_idle, count,
                                                  *(self.keys.stream_name(stream) for stream in streams)])
        self.deleted_seen += int(deleted)
        if taken and not trusted(self.clock.monotonic() - started):
            await self._give_back([(stream, entry_id, task_id) for stream, entry_id, task_id, *_ in taken
                                   if entry_id not in ours])
            return []
        quads: list[object] = []
        for stream, entry_id, task_id, attempt, _owner in taken:
            if entry_id in ours:
                logger.warning("task_id=%s worker_id=%s entry %s went idle past the visibility timeout while "
                               "running here (late heartbeat: a blocked event loop?); a peer could have taken it",
                               task_id, self.worker_id, entry_id)
                continue
            quads += [self.keys.stream_name(stream), entry_id, task_id, attempt]
        if not quads:
            return []
        reply = await self.scripts("claimEntries", keys=[*self._claim_keys(), self.keys.stream_prefix()],
                                   args=[*self._claim_args(), *quads])
        return self._runnable(reply)

    async def in_flight_streams(self, limit: int = 5000) -> list[str]:
        """The streams of the RUNNING tasks in the running index (least recently seen first, up to
        `limit` tasks), in priority order: where entries idle past the visibility timeout can be."""
        ids = text_list(await self.client.zrange(self.keys.running(), 0, limit - 1))
        if not ids:
            return []
        pipe = self.client.pipeline(transaction=False)
        for task_id in ids:
            pipe.hmget(self.keys.task(task_id), ["queue", "priority"])
        found = {(p, q) for q, p in await pipe.execute() if q and p in PRIORITIES}
        return [self.keys.stream(q, p) for p, q in sorted(found, key=lambda pq: (PRIORITIES.index(pq[0]), pq[1]))]

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
        """Hand the entries of attempts that stopped unfinished to peers (releaseEntries)."""
        if not rows:
            return 0
        idle_ms = int(self.config.visibility_timeout_s * 1000)
        pairs = [part for row in rows for part in (self.keys.stream_name(row.stream), row.entry_id)]
        return int(await self.scripts("releaseEntries", keys=[self.keys.stream_prefix()],
                                      args=[Keys.GROUP, self.worker_id, idle_ms, *pairs]))

    # -- complete -----------------------------------------------------------------------------
    def _complete_commands(self, completions: Sequence[Completion]) -> list[bytes]:
        k, c = self.keys, self.config
        commands = []
        for start in range(0, len(completions), COMPLETE_BATCH):
            now = self.clock.now_ms()
            records = []
            for completion in completions[start:start + COMPLETE_BATCH]:
                record = completion.record()
                record[3] = k.stream_name(record[3])  # the script adds the prefix, a KEY
                records.append(record)
            keys = [k.events(), k.event_seq(), k.schedule(), k.dlq(), k.stats_tasks(), k.stats_duration(),
                    k.stats_counters(), k.throughput(now // 60000), k.running(), k.task_prefix(), k.result_prefix(),
                    k.stream_prefix()]
            args = [Keys.GROUP, now, iso(now), c.task_retention_s * 1000, c.result_retention_s * 1000,
                    1 if c.dlq_enabled else 0, c.dlq_maxlen, json.dumps(records)]
            commands.append(self.scripts.command("completeTasks", keys=keys, args=args))
        return commands

    async def complete(self, completions: Sequence[Completion]) -> list[Any]:
        """Write completions, on a line of their own: the consumer's may be held by a blocking wait.

        One status per completion, as completeTasks returns them: the new status, "fenced",
        "resent", or ["quarantined", new status, reason].
        """
        if not completions:
            return []
        commands = [("completeTasks", c) for c in self._complete_commands(completions)]
        wait = [(WAIT, c) for c in self.replication.commands()]  # DTQ_REDIS_MIN_REPLICAS
        replies = await self._exchange([*commands, *wait], line=self.side_line, wait_s=self.replication.wait_s)
        if wait:
            *replies, acked = replies
        statuses: list[Any] = []
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
            statuses += reply
        if wait:
            await self._until_replicated(commands, acked, len(completions))
        return statuses

    async def _until_replicated(self, commands: list[tuple[str, bytes]], acked: object, count: int) -> None:
        """Ask again while fewer replicas than DTQ_REDIS_MIN_REPLICAS confirm the completions.

        Nobody waits for a 503 here, so the worker warns and asks again, a few times with backoff.
        It sends the completions again with the WAIT, not the WAIT alone: a WAIT counts only the
        writes of its own connection, which may be a new one by now, and a completion already
        recorded answers "resent" without changing anything. Still short after that, the worker
        goes on (an ERROR line): the tasks are done on the master, and if a failover loses that,
        they run again (at-least-once), while a worker stuck here could not even drain.
        """
        wait = [(WAIT, c) for c in self.replication.commands()]
        for attempt in range(1, REWAITS + 1):
            if self.replication.enough(acked):
                return
            logger.warning("worker_id=%s completions of %d task(s) not confirmed by %d replica(s) within %d ms "
                           "(WAIT answered %s): sending them again with the WAIT (%d of %d)", self.worker_id, count,
                           self.replication.replicas, self.replication.timeout_ms, acked, attempt, REWAITS)
            await asyncio.sleep(min(0.1 * 2 ** attempt, 2.0))
            acked = (await self._exchange([*commands, *wait], line=self.side_line,
                                          wait_s=self.replication.wait_s))[-1]
        if not self.replication.enough(acked):
            logger.error("worker_id=%s completions of %d task(s) still not confirmed by %d replica(s) (WAIT answered "
                         "%s): going on; a failover now could lose them, and those tasks would run again",
                         self.worker_id, count, self.replication.replicas, acked)

    async def claim_still_ours(self, row: Row) -> bool:
        """Whether the task still runs this attempt under this entry and this worker."""
        status, attempt, entry_id, worker_id = await self.client.hmget(
            self.keys.task(row.task_id), ["status", "attempt", "entry_id", "worker_id"])
        return (status == "RUNNING" and attempt == str(row.attempt) and entry_id == row.entry_id
                and worker_id == self.worker_id)

    async def cancel_flags(self, task_ids: Sequence[str]) -> list[bool]:
        pipe = self.client.pipeline(transaction=False)
        for task_id in task_ids:
            pipe.hget(self.keys.task(task_id), "cancel_requested")
        return [flag == "1" for flag in await pipe.execute()]

    # -- registry and heartbeat ---------------------------------------------------------------
    async def live_worker_age_s(self, worker_id: str) -> float | None:
        score = await self.client.zscore(self.keys.workers(), worker_id)
        return None if score is None else (self.clock.now_ms() - score) / 1000

    async def heartbeat(self, info: dict[str, Any], entries: Sequence[tuple[str, str, str]]) -> None:
        """Record liveness and refresh the idle time of our in-flight entries, in one round trip."""
        now = self.clock.now_ms()
        k = self.keys
        pipe = self.client.pipeline(transaction=False)
        pipe.zadd(k.workers(), {self.worker_id: now})
        # Copied, not unpacked into a literal: redis-py's mapping type takes no dict[str, ...].
        fields: dict[FieldT, EncodableT] = dict(info.items())
        fields.update({"heartbeat_at": now, "hostname": socket.gethostname(), "pid": os.getpid()})
        pipe.hset(k.worker(self.worker_id), mapping=fields)
        pipe.pexpire(k.worker(self.worker_id), int(self.config.worker_record_ttl_s * 1000))
        if self.served_types and now - self._types_at >= TYPES_REFRESH_MS:
            await self._register_types(pipe, now)
        if entries:
            flat = [part for stream, entry_id, task_id in entries
                    for part in (k.stream_name(stream), entry_id, task_id)]
            await self.scripts("touchEntries", keys=[k.running(), k.task_prefix(), k.stream_prefix()],
                               args=[Keys.GROUP, self.worker_id, now, *flat], client=pipe)
        await pipe.execute()

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

    def _lock_ttl_ms(self) -> int:
        return int(self.config.scheduler_lock_ttl_s * 1000)

    async def take_leadership(self) -> bool:
        """Stand for election: SET NX PX on the election key. True: this worker leads now."""
        return bool(await self.client.set(self.keys.leader(), self.worker_id, nx=True, px=self._lock_ttl_ms()))

    async def lead_round(self, tags: Sequence[str], *, read_registry: bool) -> LeadRound:
        """One pipeline: renew the election, take or renew the lease of every partition in `tags`,
        see which of them have an entry due, and (read_registry) read the partition registry.

        When the election was lost meanwhile, the leases this round renewed or took are handed
        back at once, so the new leader need not wait for them to expire.
        """
        k, ttl, now = self.keys, self._lock_ttl_ms(), self.clock.now_ms()
        pipe = self.client.pipeline(transaction=False)
        await self.scripts("renewLock", keys=[k.leader()], args=[self.worker_id, ttl, 0], client=pipe)
        for tag in tags:
            await self.scripts("renewLock", keys=[k.lock(tag)], args=[self.worker_id, ttl, 1], client=pipe)
        for tag in tags:
            pipe.zrangebyscore(k.schedule(tag), "-inf", now, start=0, num=1)
        if read_registry:
            pipe.hgetall(k.queues())
        replies = await self.scripts.aexecute(pipe)
        leader = bool(replies[0])
        leases, probes = replies[1:1 + len(tags)], replies[1 + len(tags):1 + 2 * len(tags)]
        held = tuple(tag for tag, reply in zip(tags, leases, strict=True) if reply)
        if not leader:
            await self._release(held)
            held = ()
        self.held_leases = frozenset(held)
        due = tuple(tag for tag, reply in zip(tags, probes, strict=True) if reply and tag in self.held_leases)
        registry = {str(q): str(v) for q, v in replies[-1].items()} if read_registry else None
        return LeadRound(leader=leader, held=held, due=due, registry=registry)

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
            head: list[object] = [self.worker_id, now, iso(now), c.task_retention_s * 1000,
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
        args: list[object] = [Keys.GROUP, self.worker_id, now, iso(now), c.task_retention_s * 1000,
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
        """Close the partitions of `tags` that hold nothing any more (closePartition); returns
        them. One whose lease this worker does not hold is left for a later round."""
        replies = await self._each_partition("closePartition", tags,
                                             lambda tag: [layout.owner, self.worker_id, Keys.GROUP])
        replies.raise_failure()
        return [tag for tag, reply in replies.ok.items() if int(reply) == 1]

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


@dataclass(slots=True)
class PartitionReplies:
    """The replies of one leader script run on several partitions (WorkerStore._each_partition)."""

    ok: dict[str, Any] = field(default_factory=dict)  # tag -> reply
    failure: Exception | None = None  # the first partition's error, if any

    def raise_failure(self) -> None:
        if self.failure is not None:
            raise self.failure
