"""Prometheus collector that reads the cluster's state from Redis at scrape time.

Every API process serves the same figures: queue gauges come from the streams themselves, and
the worker-side counters and histogram are hashes the workers' Lua scripts keep in Redis (one
set per queue partition, summed here), so a scrape of any API replica sees the whole cluster. A
scrape costs two pipelined round trips however many queues exist: (1) Redis's clock, the
partition registry, workers, leader lock, task types, the label decisions and the global stats
hashes; (2) every partition's streams, schedule, DLQ and stats hashes. A third, a script, only
when a queue or task type shows up that no scrape has given a label yet (keepLabels-1.lua). When
Redis does not answer, the scrape still succeeds with dtq_redis_up 0 and nothing else from Redis
(no stale values).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Container, Iterator
from dataclasses import dataclass, field
from typing import Any, cast

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

from .clock import redis_time_ms
from .conf import get_engine
from .connection import UNAVAILABLE_ERRORS
from .keys import PRIORITIES, Keys
from .partitions import parse_registry
from .scripts import Scripts
from .worker.executor import BUCKETS

logger = logging.getLogger("dtq.metrics")

# Label values dtq_tasks_total may use; the rest are counted as OTHER (see keep_labels).
MAX_TYPE_LABELS = 200
MAX_UNREGISTERED_TYPE_LABELS = 100
MAX_QUEUE_LABELS = 100
OTHER = "other"
# The kinds of label value keepLabels-1.lua decides, each with its cap.
QUEUE, TYPE, UNREGISTERED_TYPE = "queue", "type", "unregistered_type"
LABEL_CAPS = {QUEUE: MAX_QUEUE_LABELS, TYPE: MAX_TYPE_LABELS, UNREGISTERED_TYPE: MAX_UNREGISTERED_TYPE_LABELS}
KEPT = "kept"

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


def label_field(kind: str, name: str) -> str:
    """The labels hash's field for a value: one per queue, one per type whatever its kind."""
    return f"{QUEUE if kind == QUEUE else TYPE}:{name}"


def ranked_labels(tasks: dict[tuple[str, str, str], float], *, types: Container[str]) -> list[tuple[str, str]]:
    """Every queue and task type counted, as (kind, name), most counted first: the order in which
    values not decided yet ask for a label (the busiest get one when several arrive at once).

    A type's kind is "type" when workers registered it, "unregistered_type" otherwise (a Django
    task's type is its function's import path, which no worker registers by name; junk that got
    in before registration or with DTQ_ACCEPT_UNKNOWN_TYPES): junk cannot crowd out the types
    workers serve.
    """
    by_type: dict[str, float] = {}
    by_queue: dict[str, float] = {}
    for (queue, ttype, _), value in tasks.items():
        by_type[ttype] = by_type.get(ttype, 0.0) + value
        by_queue[queue] = by_queue.get(queue, 0.0) + value
    queues = [(QUEUE, q) for q in sorted(by_queue, key=lambda q: (-by_queue[q], q))]
    ranked_types = sorted(by_type, key=lambda t: (-by_type[t], t))
    return queues + [(TYPE if t in types else UNREGISTERED_TYPE, t) for t in ranked_types]


def first_decisions(candidates: list[tuple[str, str]]) -> dict[str, str]:
    """What keepLabels-1.lua decides for candidates on an empty labels hash (a pure mirror of
    it): kept while the kind has room, other after."""
    out: dict[str, str] = {}
    kept = dict.fromkeys(LABEL_CAPS, 0)
    for kind, name in candidates:
        field_name = label_field(kind, name)
        if field_name not in out:
            out[field_name] = KEPT if kept[kind] < LABEL_CAPS[kind] else OTHER
            kept[kind] += out[field_name] == KEPT
    return out


def fold_tasks(tasks: dict[tuple[str, str, str], float], decisions: dict[str, str],
               ) -> dict[tuple[str, str, str], float]:
    """Count each (queue, type, outcome) under its own labels where they were kept, under OTHER
    where not. A value with no decision (keepLabels could not run) is left out of this scrape
    rather than counted as other: under other now and kept later, other would go back."""
    out: dict[tuple[str, str, str], float] = {}
    for (queue, ttype, outcome), value in tasks.items():
        queue_label = _label(decisions.get(label_field(QUEUE, queue)), queue)
        type_label = _label(decisions.get(label_field(TYPE, ttype)), ttype)
        if queue_label is None or type_label is None:
            continue
        key = (queue_label, type_label, outcome)
        out[key] = out.get(key, 0.0) + value
    return out


def _label(decision: str | None, name: str) -> str | None:
    if decision is None:
        return None
    return name if decision == KEPT else OTHER


def bounded_tasks(tasks: dict[tuple[str, str, str], float], *, types: Container[str],
                  ) -> dict[tuple[str, str, str], float]:
    """Fold the counts into a bounded set of label values as a first scrape would: the
    MAX_TYPE_LABELS most counted types workers registered, the MAX_UNREGISTERED_TYPE_LABELS most
    counted other types and the MAX_QUEUE_LABELS most counted queues keep theirs, the rest are
    counted under "other", so junk types and queues cannot grow /metrics without bound."""
    return fold_tasks(tasks, first_decisions(ranked_labels(tasks, types=types)))


def keep_labels(scripts: Scripts, keys: Keys, tasks: dict[tuple[str, str, str], float], *, types: Container[str],
                decided: dict[str, str]) -> dict[str, str]:
    """The label decisions for every value in tasks: those made already (decided, as read from
    the labels hash), and one made now, for good and for every API replica, for each new one."""
    undecided = [(kind, name) for kind, name in ranked_labels(tasks, types=types)
                 if label_field(kind, name) not in decided]
    if not undecided:
        return decided
    args: list[object] = [LABEL_CAPS[QUEUE], LABEL_CAPS[TYPE], LABEL_CAPS[UNREGISTERED_TYPE]]
    args += [part for pair in undecided for part in pair]
    try:
        answers = scripts("keepLabels", keys=[keys.metrics_labels()], args=args)
    except redis.ResponseError as exc:
        # Redis refuses writes (OOM, NOREPLICAS, a replica): the new values wait for a later scrape.
        logger.warning("metrics scrape could not record new label values: %s", exc)
        return decided
    made = {label_field(kind, name): _text(answer) for (kind, name), answer in zip(undecided, answers, strict=True)}
    return {**decided, **made}


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


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


def count_alive(heartbeats: list[tuple[Any, float]], *, now_ms: int, alive_window_ms: int) -> int:
    """Workers whose last heartbeat (a score on Redis's clock) is within the window of now."""
    return sum(1 for _, score in heartbeats if score >= now_ms - alive_window_ms)


def read_snapshot(client: redis.Redis, keys: Keys, scripts: Scripts, *, alive_window_ms: int) -> Snapshot:
    """Read everything a scrape exports in two pipelined round trips: (1) Redis's clock, the
    partition registry, workers, leader, task types, label decisions and the global stats hashes;
    (2) every partition's streams, schedule, DLQ and stats hashes, summed (dtq_core/keys.py: the
    global hashes hold what no live partition does, so the sums never go back when a queue is
    deleted)."""
    snap = Snapshot()
    pipe = client.pipeline(transaction=False)
    # Workers stamp heartbeats on Redis's clock, so "alive" is judged on it, not on this host's
    # (which may be off: every API replica must report the same). redis-py blocks pipe.time() in a
    # cluster pipeline by name only; the generic command goes to a node like any keyless one.
    cast(Any, pipe).execute_command("TIME")  # untyped in redis-py
    pipe.zrange(keys.workers(), 0, -1, withscores=True)  # the stale are pruned: about the live ones
    pipe.hgetall(keys.queues())
    pipe.get(keys.leader())
    pipe.hkeys(keys.task_types())
    pipe.hgetall(keys.metrics_labels())
    pipe.hgetall(keys.global_stats_tasks())
    pipe.hgetall(keys.global_stats_duration())
    pipe.hgetall(keys.global_stats_counters())
    now, heartbeats, registry, leader, types, decided, *global_stats = pipe.execute()
    layouts = parse_registry(registry)
    snap.queues = sorted(layouts)
    snap.workers_alive = count_alive(heartbeats, now_ms=redis_time_ms(now), alive_window_ms=alive_window_ms)
    snap.leader, snap.types = leader or None, frozenset(types)

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
    tasks = parse_tasks(_sum_fields(stats[0]))
    snap.tasks = fold_tasks(tasks, keep_labels(scripts, keys, tasks, types=snap.types, decided=decided))
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
                engine.client, engine.keys, engine.scripts, alive_window_ms=int(config.visibility_timeout_s * 1000))
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
