"""Every Redis key and consumer-group name dtq uses; nothing else formats keys."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

PRIORITIES: tuple[str, ...] = ("high", "normal", "low")


@dataclass(frozen=True, slots=True)
class Keys:
    prefix: str = "dtq"  # tests use a unique prefix per test
    GROUP: ClassVar[str] = "dtq"  # the consumer group on every queue stream

    def stream(self, queue: str, priority: str) -> str:
        return f"{self.prefix}:stream:{queue}:{priority}"

    def streams(self, queue: str) -> list[str]:
        """The queue's streams in the order a worker serves them."""
        return [self.stream(queue, p) for p in PRIORITIES]

    def stream_prefix(self) -> str:  # a KEY for Lua-built stream keys: prefix .. queue .. ":" .. priority
        return f"{self.prefix}:stream:"

    def stream_name(self, stream: str) -> str:
        """A stream key without the stream prefix ("queue:priority"), as scripts that take the
        prefix as a KEY want it in ARGV."""
        name = stream.removeprefix(self.stream_prefix())
        if name == stream:
            raise ValueError(f"{stream!r} is not a stream key of prefix {self.prefix!r}")
        return name

    def wake(self, queue: str) -> str:
        """List idle workers block on (BLPOP) and fetch from in the same round trip; every script
        that adds an entry to one of the queue's streams leaves one token in it. A hint only: a
        missed token costs latency (at most the worker's block time), never a task."""
        return f"{self.prefix}:wake:{queue}"

    def wake_prefix(self) -> str:  # a KEY for Lua-built wake keys: prefix .. queue
        return f"{self.prefix}:wake:"

    def wake_any(self) -> str:
        """The one wake list workers serving every queue block on (a queue name cannot be empty,
        so no queue's list has this name): their idle wait costs the same however many queues
        exist. Every ring leaves a token here as well as on the queue's own list."""
        return f"{self.prefix}:wake"

    def ready(self) -> str:
        """Set of queues that may hold entries no worker has read yet: every script that adds an
        entry to a queue's stream adds the queue, and a fetch that finds all three of its streams
        read to the end (or the queue paused) removes it, in the same script. Workers read only
        the streams of ready queues, so queues without work cost them nothing."""
        return f"{self.prefix}:queues:ready"

    def task(self, task_id: str) -> str:
        return f"{self.prefix}:task:{task_id}"

    def task_prefix(self) -> str:  # a KEY for Lua-built task keys
        return f"{self.prefix}:task:"

    def result(self, task_id: str) -> str:
        return f"{self.prefix}:result:{task_id}"

    def result_prefix(self) -> str:  # a KEY for Lua-built result keys
        return f"{self.prefix}:result:"

    def idem(self, key: str) -> str:
        return f"{self.prefix}:idem:{key}"

    def operation(self, key: str) -> str:
        """Marker of dtq_tasks.idempotent_operation: kept apart from submit idempotency keys."""
        return f"{self.prefix}:once:{key}"

    def schedule(self) -> str:
        return f"{self.prefix}:schedule"

    def schedule_claims(self) -> str:
        return f"{self.prefix}:schedule:claims"

    def scheduler_lock(self) -> str:
        return f"{self.prefix}:lock:scheduler"

    def workers(self) -> str:
        return f"{self.prefix}:workers"

    def worker(self, worker_id: str) -> str:
        return f"{self.prefix}:worker:{worker_id}"

    def queues(self) -> str:
        return f"{self.prefix}:queues"

    def paused(self) -> str:
        return f"{self.prefix}:queues:paused"

    def paused_info(self) -> str:
        """Hash queue -> JSON {"by": actor, "at": ms} of the pause in force (what the console shows)."""
        return f"{self.prefix}:queues:paused:info"

    def task_types(self) -> str:
        """Hash task type -> when a worker serving it last registered (ms). Submit refuses types not
        in it (once it is not empty); /metrics labels only these types. Written by registerTypes."""
        return f"{self.prefix}:types"

    def dlq(self) -> str:
        return f"{self.prefix}:stream:dlq"

    def audit(self) -> str:
        return f"{self.prefix}:stream:audit"

    def audit_open(self) -> str:
        """Hash op id -> JSON {start, at, done}: operator actions whose intent is in the audit stream
        and whose outcome is not (running now, or cut short by a crash)."""
        return f"{self.prefix}:stream:audit:open"

    def events(self) -> str:
        return f"{self.prefix}:events"

    def event_seq(self) -> str:
        """Counter that makes event ids unique across processes."""
        return f"{self.prefix}:events:seq"

    def recent(self) -> str:
        """Zset of task ids by creation time, for listing recent tasks without SCAN."""
        return f"{self.prefix}:tasks:recent"

    def running(self) -> str:
        """Zset of RUNNING task ids by their owner's last sign of life (claim or heartbeat), so the
        leader can recover tasks whose stream entry was deleted while pending."""
        return f"{self.prefix}:tasks:running"

    def stats_tasks(self) -> str:
        """Hash "queue|type|outcome" -> count, written by workers, read by /metrics."""
        return f"{self.prefix}:stats:tasks"

    def stats_duration(self) -> str:
        """Hash of handler-duration histogram buckets, written by workers."""
        return f"{self.prefix}:stats:duration"

    def stats_counters(self) -> str:
        """Hash of cluster-wide counters (redeliveries, absorbed, dlq trims, events dropped)."""
        return f"{self.prefix}:stats:counters"

    def schedule_counts(self) -> str:
        """Hash queue -> entries in the schedule, kept by the scripts that add and remove them."""
        return f"{self.prefix}:schedule:counts"

    def dlq_counts(self) -> str:
        """Hash queue -> dead letters in the DLQ stream, kept exact by the DLQ scripts."""
        return f"{self.prefix}:stream:dlq:counts"

    def throughput(self, minute: int) -> str:
        """Hash queue -> tasks finished in that epoch minute (expires after an hour)."""
        return f"{self.prefix}:stats:done:{minute}"
