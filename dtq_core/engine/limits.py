"""Flow control (issue 22): a queue's concurrency and rate limits, and the per-group limits of its
tasks that carry a group_key. Enforced in Redis by the fetch script (includes/limits.lua), so they
hold across every worker and process.

A queue's limits live in each of its partitions (the partition's `limits` hash, in its slot). A
queue with one partition enforces them exactly. A partitioned queue (DTQ_QUEUE_PARTITIONS) gives
each partition a share of `concurrency` and of `rate.limit` (the total divided, the remainder to
the first partitions, at least 1 each): the total is never exceeded when the limit is at least
the number of partitions (scope "per_partition"); below that, each partition still runs one at a
time, so the total may reach the number of partitions. One script per partition cannot read the
others' slots (Redis Cluster), and a shared counter in one slot would put every fetch of every
partition on one master. Group limits are exact on any layout: a task with a group_key goes to the
partition its group_key picks, so all of a group's tasks share one partition.

Settings form: DTQ_QUEUE_LIMITS = {"emails": {"concurrency": 2, ...}}, applied by every worker at
start (sync_declared) only when the settings' value for a queue differs from the one last applied:
a limit set through the API stays until a deploy changes the settings' value for that queue.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Mapping
from typing import Any

from ..clock import iso
from ..errors import ErrorCode, PartitionClosed, ValidationError
from ..partitions import Layout
from ..task import valid_queue_name
from .audit import Actor, Audit
from .plumbing import Noun, Plumbing
from .registry import Registry

FIELDS = ("concurrency", "rate", "group_concurrency", "group_rate")
MAX_CONCURRENCY = 100_000
MAX_RATE = 1_000_000
MIN_PERIOD_S, MAX_PERIOD_S = 0.001, 86_400.0
SETTINGS_ACTOR = Actor(name="settings:DTQ_QUEUE_LIMITS", source="worker")


def _whole(name: str, value: Any, maximum: int) -> int:
    # The range first: float() of a JSON integer of 400 digits raises OverflowError.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1 <= value <= maximum \
            or not float(value).is_integer():
        raise ValidationError(f"{name} must be a whole number from 1 to {maximum}", field=name)
    return int(value)


def _rate(name: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ValidationError(f'{name} must be an object {{"limit": n, "period_s": s}} or null', field=name)
    unknown = sorted(set(value) - {"limit", "period_s"})
    if unknown:
        raise ValidationError(f"{name} has unknown fields: {', '.join(map(str, unknown))}", field=name)
    limit = _whole(f"{name}.limit", value.get("limit"), MAX_RATE)
    period = value.get("period_s")
    # No math.isfinite: it overflows on a huge integer; NaN and infinities fail the range.
    if isinstance(period, bool) or not isinstance(period, (int, float)) or not MIN_PERIOD_S <= period <= MAX_PERIOD_S:
        raise ValidationError(f"{name}.period_s must be a number of seconds from {MIN_PERIOD_S:g} to {MAX_PERIOD_S:g}",
                              field=f"{name}.period_s")
    return {"limit": limit, "period_s": float(period)}


def validate(spec: Any) -> dict[str, Any]:
    """The limits as stored: every field present (None = no such limit); ValidationError naming
    the field otherwise."""
    if spec is None:
        spec = {}
    if not isinstance(spec, Mapping):
        raise ValidationError("limits must be an object", field="limits")
    unknown = sorted(set(spec) - set(FIELDS))
    if unknown:
        raise ValidationError(f"unknown limit fields: {', '.join(map(str, unknown))}", field=str(unknown[0]))
    out: dict[str, Any] = dict.fromkeys(FIELDS)
    for name in ("concurrency", "group_concurrency"):
        if spec.get(name) is not None:
            out[name] = _whole(name, spec[name], MAX_CONCURRENCY)
    for name in ("rate", "group_rate"):
        if spec.get(name) is not None:
            out[name] = _rate(name, spec[name])
    return out


def share(total: int, n: int, i: int) -> int:
    """Partition i's share of a queue-wide limit over n partitions: the total divided, the
    remainder to the first ones, at least 1 each."""
    base, extra = divmod(total, n)
    return max(1, base + (1 if i < extra else 0))


def _partition_args(spec: dict[str, Any], n: int, i: int) -> list[object]:
    """conc, rate_n, rate_ms, gconc, grate_n, grate_ms of partition i ('' = none)."""
    conc = spec["concurrency"]
    rate = spec["rate"]
    grate = spec["group_rate"]
    return [
        "" if conc is None else share(conc, n, i),
        "" if rate is None else share(rate["limit"], n, i),
        "" if rate is None else max(1, round(rate["period_s"] * 1000)),
        "" if spec["group_concurrency"] is None else spec["group_concurrency"],
        "" if grate is None else grate["limit"],
        "" if grate is None else max(1, round(grate["period_s"] * 1000)),
    ]


def _encode(spec: dict[str, Any] | None) -> str:
    return "" if spec is None else json.dumps(spec, sort_keys=True, separators=(",", ":"))


def _decode(raw: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(raw) if raw else None
        return validate(value) if isinstance(value, dict) else None
    except (ValueError, ValidationError):
        return None


class Limits(Noun):
    """engine.limits: get, set, clear and list a queue's flow-control limits (audited as
    "queue.limits")."""

    def __init__(self, plumbing: Plumbing, audit: Audit, registry: Registry) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.registry = registry

    @staticmethod
    def _check_name(queue: Any) -> str:
        if not isinstance(queue, str) or not valid_queue_name(queue):
            raise ValidationError("queue must match [a-z0-9][a-z0-9_-]{0,63}", field="queue")
        return queue

    # -- reads ------------------------------------------------------------------------------------
    def get(self, queue: str) -> dict[str, Any]:
        """The queue's limits and their usage now (summed over its partitions). A queue that was
        never used has none."""
        self._check_name(queue)
        layout = self.registry.get(queue, fresh=True)
        return self._views([layout or Layout(queue=queue, tags=())])[0]

    def list(self) -> builtins.list[dict[str, Any]]:
        """get() of every registered queue that has limits (or a handler's pause in force)."""
        layouts = self.registry.layouts(fresh=True)
        views = self._views([layouts[q] for q in sorted(layouts)])
        return [v for v in views if v["source"] is not None or v["paused_until"] is not None]

    def _views(self, layouts: builtins.list[Layout]) -> builtins.list[dict[str, Any]]:
        """Two pipelined round trips: every partition's limits hash, then its usage counts."""
        k = self.keys
        now = self.redis_now_ms()  # windows and pauses are on the workers' clock, Redis's
        pairs = [(layout, tag) for layout in layouts for tag in layout.all_tags]
        pipe = self.client.pipeline(transaction=False)
        for _, tag in pairs:
            pipe.hgetall(k.limits(tag))
        hashes = [h if isinstance(h, dict) else {} for h in pipe.execute(raise_on_error=False)]
        pipe = self.client.pipeline(transaction=False)
        for (_, tag), hashed in zip(pairs, hashes, strict=True):
            pipe.zcard(k.running(tag))
            pipe.zcount(k.limits_rate(tag), f"({now - int(hashed.get('rate_ms') or 0)}", "+inf")
            pipe.hlen(k.limits_groups(tag))
        counts = iter(pipe.execute(raise_on_error=False))
        by_tag = iter(hashes)
        out = []
        for layout in layouts:
            first: dict[str, Any] = {}
            running = rate_used = groups = throttled = 0
            paused_until = 0
            for i, _ in enumerate(layout.all_tags):
                hashed = next(by_tag)
                if i == 0:
                    first = hashed
                n_running, n_started, n_groups = next(counts), next(counts), next(counts)
                running += n_running if isinstance(n_running, int) else 0
                if hashed.get("rate_ms") and isinstance(n_started, int):
                    rate_used += n_started
                groups += n_groups if isinstance(n_groups, int) else 0
                throttled += int(hashed.get("throttled") or 0)
                paused_until = max(paused_until, int(float(hashed.get("pause_until") or 0)))
            spec = _decode(first.get("spec")) or dict.fromkeys(FIELDS)
            out.append({
                "queue": layout.queue,
                **spec,
                "source": first.get("source") or None,
                "paused_until": iso(paused_until) if paused_until > now else None,
                "scope": "exact" if len(layout.all_tags) <= 1 else "per_partition",
                "usage": {"running": running, "rate_used": rate_used, "groups_running": groups,
                          "throttled_total": throttled},
            })
        return out

    # -- changes ----------------------------------------------------------------------------------
    def set(self, queue: str, limits: Any, *, actor: Actor, source: str = "api") -> dict[str, Any]:
        """Replace the queue's limits (PUT: a missing or null field is no such limit); registers a
        queue that was never used. Audited as "queue.limits"."""
        self._check_name(queue)
        spec = validate(limits)
        layout = self.registry.ensure(queue)
        with self.audit.operation(actor, "queue.limits", f"queue:{queue}", selected=1,
                                  selection={"queue": queue, "limits": spec}) as op:
            self._apply(layout, spec, source=source, settings=None if source == "settings" else ...)
            op.done = 1
        return self.get(queue)

    def clear(self, queue: str, *, actor: Actor) -> dict[str, Any]:
        """No limits on the queue any more (set(queue, {})). Audited as "queue.limits"."""
        return self.set(queue, {}, actor=actor)

    def _apply(self, layout: Layout, spec: dict[str, Any], *, source: str, settings: Any) -> None:
        """Write the spec in every partition. settings: the DTQ_QUEUE_LIMITS value to record as
        last applied (None: none; ...: keep the one recorded)."""
        empty = all(spec[f] is None for f in FIELDS)
        for _ in range(2):
            tags = layout.all_tags
            kept = ""
            if settings is ...:
                kept = str(self.client.hget(self.keys.limits(tags[0]), "settings") or "")
            elif settings is not None:
                kept = _encode(settings)
            now = self.clock.now_ms()
            pipe = self.client.pipeline(transaction=False)
            for i, tag in enumerate(tags):
                self.scripts("setLimits", keys=[self.keys.partition(tag)],
                             args=[layout.owner, now, "" if empty else _encode(spec), source, kept,
                                   *_partition_args(spec, len(tags), i)], client=pipe)
            replies = self.scripts.execute(pipe)
            if all(int(r[0]) != ErrorCode.PARTITION_CLOSED for r in replies):
                return
            self.registry.forget_cache()
            layout = self.registry.ensure(layout.queue)
        raise PartitionClosed(f"setLimits: the partitions of queue {layout.queue!r} keep changing",
                              queue=layout.queue)

    # -- settings form ----------------------------------------------------------------------------
    def sync_declared(self, declared: Mapping[str, Any]) -> dict[str, builtins.list[str]]:
        """Apply DTQ_QUEUE_LIMITS: a queue whose settings value differs from the one last applied
        gets it (source "settings"); a queue the settings no longer name loses the limits they had
        set, unless the API changed them since. Returns {"applied": [...], "cleared": [...],
        "unchanged": [...]}."""
        report: dict[str, builtins.list[str]] = {"applied": [], "cleared": [], "unchanged": []}
        wanted = {self._check_name(q): validate(spec) for q, spec in declared.items()}
        layouts = self.registry.layouts(fresh=True)
        recorded: dict[str, dict[str, Any] | None] = {}
        sources: dict[str, str | None] = {}
        names = sorted(set(layouts) | set(wanted))
        pipe = self.client.pipeline(transaction=False)
        for q in names:
            if q in layouts:
                pipe.hmget(self.keys.limits(layouts[q].all_tags[0]), "settings", "source")
        replies = iter(pipe.execute())
        for q in names:
            settings_raw, source = next(replies) if q in layouts else (None, None)
            recorded[q] = _decode(settings_raw)
            sources[q] = source
        for q in names:
            if q in wanted:
                if recorded[q] == wanted[q]:
                    report["unchanged"].append(q)
                    continue
                layout = self.registry.ensure(q)
                with self.audit.operation(SETTINGS_ACTOR, "queue.limits", f"queue:{q}", selected=1,
                                          selection={"queue": q, "limits": wanted[q]}) as op:
                    self._apply(layout, wanted[q], source="settings", settings=wanted[q])
                    op.done = 1
                report["applied"].append(q)
            elif recorded[q] is not None:
                layout = layouts[q]
                with self.audit.operation(SETTINGS_ACTOR, "queue.limits", f"queue:{q}", selected=1,
                                          selection={"queue": q, "limits": None}) as op:
                    if sources[q] == "settings":
                        self._apply(layout, validate({}), source="settings", settings=None)
                    else:  # set through the API since: keep it, forget the settings' value
                        current = self.get(q)
                        self._apply(layout, validate({f: current[f] for f in FIELDS}), source=str(sources[q]),
                                    settings=None)
                    op.done = 1
                report["cleared"].append(q)
        return report
