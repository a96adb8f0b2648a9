"""Prometheus collector that reads the cluster's state from Redis at scrape time.

Every API process serves the same figures: queue gauges come from the streams themselves, and
the worker-side counters and histogram are hashes the workers' Lua scripts keep in Redis (one
set per queue partition, summed here), so a scrape of any API replica sees the whole cluster. A
scrape costs two pipelined round trips however many queues exist: (1) the partition registry,
workers, leader lock, task types and the global stats hashes; (2) every partition's streams,
schedule, DLQ and stats hashes. When Redis does not answer, the scrape still succeeds with
dtq_redis_up 0 and nothing else from Redis (no stale values).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import Any

import redis
from prometheus_client.core import (
    REGISTRY,
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    InfoMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

from .conf import get_engine
from .connection import UNAVAILABLE_ERRORS
from .keys import PRIORITIES, Keys
from .partitions import parse_registry
from .worker.executor import BUCKETS

logger = logging.getLogger("dtq.metrics")

# Label values dtq_tasks_total may use; the rest are counted as OTHER (see bounded_tasks).
MAX_TYPE_LABELS = 200
MAX_UNREGISTERED_TYPE_LABELS = 100
MAX_QUEUE_LABELS = 100
OTHER = "other"

# A tuple of its own: mypy does not follow a starred tuple in an except clause.
_REDIS_FAILURES: tuple[type[BaseException], ...] = (*UNAVAILABLE_ERRORS, redis.RedisError)

# Worker-written counters: field of keys.stats_counters(tag) -> metric name (without _total) and help.
COUNTERS: dict[str, tuple[str, str]] = {
    "redeliveries": ("dtq_redeliveries", "Entries reclaimed from a silent worker after the visibility timeout."),
    "absorbed": ("dtq_absorbed_duplicates", "Duplicate stream entries acknowledged without running."),
    "fenced": ("dtq_fenced_completions", "Completions discarded because a newer attempt owns the task."),
    "dlq_trimmed": ("dtq_dlq_trimmed", "Dead letters evicted by the DLQ cap (DTQ_DLQ_MAXLEN)."),
    "corrupt_records": ("dtq_corrupt_records", "Task records a worker or the scheduler could not process (a corrupt "
                                               "field), quarantined in the DLQ as dtq.CorruptRecord."),
    "events_dropped": ("dtq_events_dropped", "Non-terminal live events dropped for slow WebSocket clients."),
}


@dataclass(slots=True)
class Snapshot:
    """What one scrape read from Redis, already parsed."""

    queues: list[str] = field(default_factory=list)
    depth: dict[tuple[str, str], int] = field(default_factory=dict)  # (queue, priority) -> waiting entries
    pending: dict[str, int] = field(default_factory=dict)  # queue -> delivered, not yet acknowledged
    retry_scheduled: int = 0
    dlq_depth: int = 0
    workers_alive: int = 0
    leader: str | None = None
    tasks: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (queue, type, outcome) -> count
    types: frozenset[str] = frozenset()  # task types workers registered (keys.task_types())
    duration_buckets: list[tuple[str, float]] = field(default_factory=lambda: parse_histogram({})[0])  # cumulative
    duration_sum: float = 0.0
    counters: dict[str, float] = field(default_factory=dict)
    running: dict[str, int] = field(default_factory=dict)  # queue -> RUNNING tasks (the slots a limit counts)
    limits: dict[tuple[str, str], float] = field(default_factory=dict)  # (queue, kind) -> the limit set
    throttled: dict[str, float] = field(default_factory=dict)  # queue -> claims held back by a limit


def _bucket_field(bound: float) -> str:
    # Must match executor.bucket_label, which writes the fields.
    return f"le_{bound:g}"


def _num(raw: Any) -> float:
    try:
        return max(0.0, float(raw))
    except (TypeError, ValueError):
        return 0.0


def parse_tasks(raw: dict[str, Any]) -> dict[tuple[str, str, str], float]:
    """Split "queue|type|outcome" fields; queue names and types cannot hold "|", outcomes neither."""
    out: dict[tuple[str, str, str], float] = {}
    for name, value in raw.items():
        queue, _, rest = name.partition("|")
        ttype, _, outcome = rest.rpartition("|")
        if queue and ttype and outcome:
            out[(queue, ttype, outcome)] = _num(value)
    return out


def bounded_tasks(tasks: dict[tuple[str, str, str], float], *, types: Container[str],
                  ) -> dict[tuple[str, str, str], float]:
    """Fold the (queue, type, outcome) counts into a bounded set of label values.

    A type keeps its label when it is among the MAX_TYPE_LABELS most counted types workers
    registered, or among the MAX_UNREGISTERED_TYPE_LABELS most counted other types (a Django
    task's type is its function's import path, which no worker registers by name; junk that got in
    before registration or with DTQ_ACCEPT_UNKNOWN_TYPES); a queue when it is among the
    MAX_QUEUE_LABELS most counted. Everything else is counted under "other", so junk types and
    queues cannot grow /metrics without bound (each would add a series per outcome).
    """
    by_type: dict[str, float] = {}
    by_queue: dict[str, float] = {}
    for (queue, ttype, _), value in tasks.items():
        by_type[ttype] = by_type.get(ttype, 0.0) + value
        by_queue[queue] = by_queue.get(queue, 0.0) + value
    ranked = sorted(by_type, key=lambda t: (-by_type[t], t))
    kept_types = set([t for t in ranked if t in types][:MAX_TYPE_LABELS]
                     + [t for t in ranked if t not in types][:MAX_UNREGISTERED_TYPE_LABELS])
    kept_queues = set(sorted(by_queue, key=lambda q: (-by_queue[q], q))[:MAX_QUEUE_LABELS])
    out: dict[tuple[str, str, str], float] = {}
    for (queue, ttype, outcome), value in tasks.items():
        key = (queue if queue in kept_queues else OTHER, ttype if ttype in kept_types else OTHER, outcome)
        out[key] = out.get(key, 0.0) + value
    return out


def parse_histogram(raw: dict[str, Any]) -> tuple[list[tuple[str, float]], float]:
    """Turn per-bucket counts (non-cumulative, as workers write them) into Prometheus buckets."""
    buckets: list[tuple[str, float]] = []
    running = 0.0
    for bound in BUCKETS:
        running += _num(raw.get(_bucket_field(bound)))
        buckets.append((f"{bound:g}", running))
    running += _num(raw.get("le_inf"))
    buckets.append(("+Inf", running))
    return buckets, _num(raw.get("sum"))


LIMIT_KINDS = ("concurrency", "rate", "group_concurrency", "group_rate")


def parse_limits(raw: Any) -> dict[str, float]:
    """The limits a queue's limits hash holds (its "spec", as engine.limits wrote it) by kind; a rate
    as starts per second (limit / period_s). Nothing for a missing or unreadable spec."""
    try:
        spec = json.loads(raw.get("spec") or "{}") if isinstance(raw, dict) else {}
        out = {}
        for kind in LIMIT_KINDS:
            value = spec.get(kind)
            if isinstance(value, dict):
                out[kind] = float(value["limit"]) / float(value["period_s"])
            elif value is not None:
                out[kind] = float(value)
        return out
    except (ValueError, TypeError, KeyError, AttributeError, ZeroDivisionError):
        return {}


def _sum_fields(hashes: list[Any]) -> dict[str, float]:
    """Field-wise sums of hashes (HGETALL replies; an error reply, a key of another type, adds
    nothing)."""
    total: dict[str, float] = {}
    for fields in hashes:
        if isinstance(fields, dict):
            for name, value in fields.items():
                total[name] = total.get(name, 0.0) + _num(value)
    return total


def read_snapshot(client: redis.Redis, keys: Keys, *, now_ms: int, alive_window_ms: int) -> Snapshot:
    """Read everything a scrape exports in two pipelined round trips: (1) the partition registry,
    workers, leader, task types and the global stats hashes; (2) every partition's streams,
    schedule, DLQ and stats hashes, summed (dtq_core/keys.py: the global hashes hold what no live
    partition does, so the sums never go back when a queue is deleted)."""
    snap = Snapshot()
    pipe = client.pipeline(transaction=False)
    pipe.hgetall(keys.queues())
    pipe.zcount(keys.workers(), now_ms - alive_window_ms, "+inf")
    pipe.get(keys.leader())
    pipe.hkeys(keys.task_types())
    pipe.hgetall(keys.global_stats_tasks())
    pipe.hgetall(keys.global_stats_duration())
    pipe.hgetall(keys.global_stats_counters())
    registry, alive, leader, types, *global_stats = pipe.execute()
    layouts = parse_registry(registry)
    snap.queues = sorted(layouts)
    snap.workers_alive, snap.leader, snap.types = int(alive), leader or None, frozenset(types)

    pipe = client.pipeline(transaction=False)
    for queue in snap.queues:
        for tag in layouts[queue].all_tags:
            for stream in keys.streams(tag, queue):
                pipe.xlen(stream)
                pipe.xpending(stream, Keys.GROUP)
            pipe.zcard(keys.schedule(tag))
            pipe.xlen(keys.dlq(tag))
            pipe.hgetall(keys.stats_tasks(tag))
            pipe.hgetall(keys.stats_duration(tag))
            pipe.hgetall(keys.stats_counters(tag))
            pipe.zcard(keys.running(tag))
            pipe.hgetall(keys.limits(tag))
    # A stream or group may be missing (a queue known before its first worker): count it as 0.
    replies = pipe.execute(raise_on_error=False)
    for error in (r for r in replies if isinstance(r, Exception)):
        if isinstance(error, UNAVAILABLE_ERRORS):
            raise error
    stats: list[list[Any]] = [[global_stats[0]], [global_stats[1]], [global_stats[2]]]
    reply = iter(replies)
    for queue in snap.queues:
        in_flight = running = 0
        throttled = 0.0
        for i, _ in enumerate(layouts[queue].all_tags):
            for priority in PRIORITIES:
                length, summary = next(reply), next(reply)
                pending = int(summary["pending"]) if isinstance(summary, dict) else 0
                in_flight += pending
                # Entries stay in the stream until acknowledged, so waiting = length - in flight
                # (the same figure as GET /api/v1/queues); depth + pending is what the gate counts.
                waiting = max(0, (length if isinstance(length, int) else 0) - pending)
                snap.depth[(queue, priority)] = snap.depth.get((queue, priority), 0) + waiting
            scheduled, dead = next(reply), next(reply)
            snap.retry_scheduled += scheduled if isinstance(scheduled, int) else 0
            snap.dlq_depth += dead if isinstance(dead, int) else 0
            for kind in stats:
                kind.append(next(reply))
            n_running, limits = next(reply), next(reply)
            running += n_running if isinstance(n_running, int) else 0
            throttled += _num(limits.get("throttled")) if isinstance(limits, dict) else 0.0
            if i == 0:  # every partition holds the queue-wide spec; each enforces its share of it
                snap.limits.update({(queue, kind): value for kind, value in parse_limits(limits).items()})
        snap.pending[queue] = in_flight
        snap.running[queue] = running
        snap.throttled[queue] = throttled
    snap.tasks = bounded_tasks(parse_tasks(_sum_fields(stats[0])), types=snap.types)
    snap.duration_buckets, snap.duration_sum = parse_histogram(_sum_fields(stats[1]))
    counters = _sum_fields(stats[2])
    snap.counters = {name: counters.get(name, 0.0) for name in COUNTERS}
    return snap


def families(snap: Snapshot | None, *, max_queue_depth: int) -> Iterator[Metric]:
    """Build the exported metric families; snap None means Redis did not answer."""
    up = GaugeMetricFamily("dtq_redis_up", "1 when this scrape could read Redis, 0 when it could not.")
    up.add_metric([], 0 if snap is None else 1)
    yield up
    if snap is None:
        return
    depth = GaugeMetricFamily("dtq_queue_depth", "Tasks waiting in a queue's priority stream (not yet delivered).",
                              labels=["queue", "priority"])
    for (queue, priority), value in sorted(snap.depth.items()):
        depth.add_metric([queue, priority], value)
    yield depth
    pending = GaugeMetricFamily("dtq_queue_pending", "Entries delivered to a worker and not yet acknowledged.",
                                labels=["queue"])
    for queue, value in sorted(snap.pending.items()):
        pending.add_metric([queue], value)
    yield pending
    yield GaugeMetricFamily("dtq_queue_depth_limit", "The ingest gate per queue (DTQ_MAX_QUEUE_DEPTH; 0 = off).",
                            value=max_queue_depth)
    yield GaugeMetricFamily("dtq_retry_scheduled", "Due retries and delayed tasks waiting in the schedule.",
                            value=snap.retry_scheduled)
    yield GaugeMetricFamily("dtq_dlq_depth", "Entries in the dead-letter stream.", value=snap.dlq_depth)
    yield GaugeMetricFamily("dtq_workers_alive", "Workers whose last heartbeat is within the visibility timeout.",
                            value=snap.workers_alive)
    yield GaugeMetricFamily("dtq_scheduler_leader", "1 while a worker holds the scheduler leader lock.",
                            value=1 if snap.leader else 0)
    info = InfoMetricFamily("dtq_scheduler_leader", "The worker id holding the scheduler leader lock.",
                            labels=["worker_id"])
    if snap.leader:
        info.add_metric([snap.leader], {})
    yield info
    tasks = CounterMetricFamily("dtq_tasks", "Attempts finished, by queue, task type and outcome.",
                                labels=["queue", "type", "outcome"])
    for labels, count in sorted(snap.tasks.items()):
        tasks.add_metric(list(labels), count)
    yield tasks
    yield HistogramMetricFamily("dtq_task_duration_seconds", "Handler run time per attempt (cancelled ones excluded).",
                                buckets=snap.duration_buckets, sum_value=snap.duration_sum)
    for name, (metric, help_text) in COUNTERS.items():
        yield CounterMetricFamily(metric, help_text, value=snap.counters.get(name, 0.0))
    # Flow control (issue 22): per queue, never per group (group keys are unbounded).
    running = GaugeMetricFamily("dtq_queue_limit_running",
                                "Tasks of a queue RUNNING now: the slots its concurrency limit counts.",
                                labels=["queue"])
    for queue, value in sorted(snap.running.items()):
        running.add_metric([queue], value)
    yield running
    limit = GaugeMetricFamily("dtq_queue_limit", "A queue's flow-control limits as set: concurrency and "
                              "group_concurrency in tasks, rate and group_rate in starts per second.",
                              labels=["queue", "kind"])
    for (queue, kind), setting in sorted(snap.limits.items()):
        limit.add_metric([queue, kind], setting)
    yield limit
    throttled = CounterMetricFamily("dtq_queue_throttled", "Fetches and claims of a queue held back by its limits.",
                                    labels=["queue"])
    for queue, held in sorted(snap.throttled.items()):
        throttled.add_metric([queue], held)
    yield throttled


class RedisCollector(Collector):
    """Reads a fresh Snapshot from Redis on every collect()."""

    def __init__(self, engine_factory: Callable[[], Any]) -> None:
        self._engine_factory = engine_factory

    def describe(self) -> Iterator[Metric]:
        # Names only, so registering the collector does not touch Redis.
        return families(Snapshot(), max_queue_depth=0)

    def collect(self) -> Iterator[Metric]:
        engine = self._engine_factory()
        config = engine.config
        try:
            snap: Snapshot | None = read_snapshot(
                engine.client, engine.keys, now_ms=engine.clock.now_ms(),
                alive_window_ms=int(config.visibility_timeout_s * 1000))
        except _REDIS_FAILURES as exc:
            # Any Redis failure reports dtq_redis_up 0: a scrape must answer, never 500 or hang.
            logger.warning("metrics scrape could not read Redis: %s: %s", type(exc).__name__, exc)
            snap = None
        return families(snap, max_queue_depth=config.max_queue_depth)


_registered: RedisCollector | None = None
_lock = threading.Lock()


def register(registry: CollectorRegistry = REGISTRY) -> RedisCollector:
    """Register the collector once per process (idempotent)."""
    global _registered
    with _lock:
        if _registered is None:
            collector = RedisCollector(get_engine)
            registry.register(collector)
            _registered = collector
        return _registered
