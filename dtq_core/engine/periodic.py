"""Periodic schedules (docs/tasks.md#periodic-tasks): declare, list, change, pause, resume,
trigger and delete them; the leader fires them (dtq_core/worker/periodic.py, firePeriodic-1.lua).

A schedule lives in the first partition of its target queue (Layout.tags[0]: lowering
DTQ_QUEUE_PARTITIONS drains the last partitions, never the first): its hash Keys.periodic(tag,
name) holds the spec (JSON) and the state, the partition's index Keys.periodic_index(tag) its
next tick, and the global hash Keys.periodic_registry() names its partition. Changes go through
savePeriodic-1 and dropPeriodic-1 (a resume through firePeriodic-1, which fires its catch-up in
the same step); the registry entry is written first on a create (it claims the name) and
removed last on a delete, so every schedule that can fire is listed (a name whose partition hash
is not there yet is skipped).

A change is read, computed here, and written with a compare-and-set on the schedule's revision:
when another change landed in between (two API processes, a leader's fire), it is read and
computed again (_settle), so concurrent changes all hold and a resume happens once. What it
computes from now (the next tick) uses Redis's clock, the one the leader fires by (_now_ms).

Every changing call is an audited operator action, like the queues' (engine/queues.py).

A schedule of an encrypted type (DTQ_ENCRYPT_TYPES) holds its payload sealed, in its spec and in
the task fields its ticks copy (the same token), so Redis holds no plaintext of it and firing seals
nothing. A process that encrypts the type and holds the key opens it when it reads the schedule
and seals it again (under the first key) when it writes it; any other keeps it sealed.
"""

from __future__ import annotations

import builtins
import dataclasses
import functools
import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..clock import iso
from ..encryption import DecryptionFailed, encrypts, is_sealed, reveal, sealed_with_first, token_shaped, unseal
from ..errors import (
    DtqError,
    ErrorCode,
    PartitionClosed,
    PeriodicConflict,
    PeriodicDeclaredInCode,
    PeriodicExists,
    PeriodicNotFound,
    ValidationError,
    raise_for_code,
)
from ..firing import FirePlan, fire_args
from ..firing import count as count_ticks
from ..keys import PRIORITIES, is_task_id, tag_of
from ..partitions import Layout
from ..replies import optional_text, text_hash
from ..submit import validate as validate_submission
from ..task import TASK_TYPE_RE, TERMINAL
from ..ticks import BadSchedule, Ticks
from .audit import Actor, Audit
from .plumbing import Noun, Plumbing
from .registry import Registry
from .tasks import RECENT_CAP, Tasks

logger = logging.getLogger("dtq.periodic")

OVERLAP = ("allow", "skip")
MISFIRE = ("skip", "run_once")
SOURCES = ("code", "api")
ATTEMPTS = 5  # reads a change makes when other changes keep landing between its read and its write


class _Stale(Exception):
    """A compare-and-set on a schedule's revision found another change landed since the read."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PeriodicSpec:
    """What a user declares (@dtq_tasks.periodic, DTQ_PERIODIC) or POSTs."""

    name: str
    type: str
    payload: Any = None
    queue: str = "default"
    priority: str = "normal"
    cron: str | None = None  # 5 fields, or 6 with seconds first
    timezone: str = "UTC"  # IANA name; cron only
    every_seconds: float | None = None  # exactly one of cron / every_seconds
    overlap: str = "allow"  # "allow" | "skip": skip a tick while the previous run is not finished
    misfire: str = "skip"  # "skip" | "run_once": what ticks missed while no leader fired become
    max_attempts: int | None = None
    timeout_seconds: float | None = None
    source: str = "api"  # "code": declared, synced at worker start | "api"

    @classmethod
    def from_dict(cls, data: Any, *, source: str = "api") -> PeriodicSpec:
        """A spec from a request body (or a DTQ_PERIODIC entry); ValidationError naming an unknown
        field. Not validated yet: Periodic.create and update do that."""
        if not isinstance(data, dict):
            raise ValidationError("a periodic schedule is a JSON object", field=None)
        known = {f.name for f in dataclasses.fields(cls)} - {"source"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValidationError(f"unknown field {unknown[0]!r}", field=unknown[0])
        for required in ("name", "type"):
            if required not in data:
                raise ValidationError(f"{required} is required", field=required)
        return cls(**data, source=source)

    def spec_fields(self) -> dict[str, Any]:
        """The spec as stored (everything but the name)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "name"}

    @property
    def ticks(self) -> Ticks:
        # A stored spec that an earlier version accepted and this one does not (a `localtime`
        # zone) is a 400 naming its field, for the operator to PATCH, not a 500.
        try:
            return Ticks(cron=self.cron, timezone=self.timezone, every_seconds=self.every_seconds)
        except BadSchedule as exc:
            raise ValidationError(f"this schedule cannot be evaluated: {exc}", field=exc.field) from None

    def description(self) -> str:
        try:
            return self.ticks.describe()
        except ValidationError as exc:
            return str(exc)


# Fields a PATCH may change (the name is the schedule's identity; the source is how it was made).
CHANGEABLE = frozenset(f.name for f in dataclasses.fields(PeriodicSpec)) - {"name", "source"}
SCHEDULE_FIELDS = ("cron", "timezone", "every_seconds")


def validate_spec(config: Any, spec: PeriodicSpec) -> PeriodicSpec:
    """Check every field; raise ValidationError naming the first one wrong. Returns the spec with
    its numbers normalised (every_seconds a float, cron's whitespace collapsed)."""
    if not isinstance(spec.name, str) or not TASK_TYPE_RE.fullmatch(spec.name):
        raise ValidationError("name must be 1-200 characters of letters, digits and _ . : -", field="name")
    # The task it fires is checked as a submission would be (type, payload, queue, options).
    validate_submission(config, spec.type, spec.payload, queue=spec.queue, priority=spec.priority,
                        max_attempts=spec.max_attempts, timeout_seconds=spec.timeout_seconds)
    if spec.cron is not None and not isinstance(spec.cron, str):
        raise ValidationError("cron must be a string", field="cron")
    if not isinstance(spec.timezone, str):
        raise ValidationError("timezone must be a string", field="timezone")
    if spec.every_seconds is not None and spec.timezone != "UTC":
        raise ValidationError("timezone applies to cron schedules only (every_seconds counts from the Unix epoch)",
                              field="timezone")
    try:
        ticks = Ticks(cron=" ".join(spec.cron.split()) if spec.cron else spec.cron, timezone=spec.timezone,
                      every_seconds=spec.every_seconds)
    except BadSchedule as exc:
        raise ValidationError(str(exc), field=exc.field) from None
    if spec.overlap not in OVERLAP:
        raise ValidationError(f"overlap must be one of {', '.join(OVERLAP)}", field="overlap")
    if spec.misfire not in MISFIRE:
        raise ValidationError(f"misfire must be one of {', '.join(MISFIRE)}", field="misfire")
    if spec.source not in SOURCES:
        raise ValidationError(f"source must be one of {', '.join(SOURCES)}", field="source")
    if spec.priority not in PRIORITIES:  # validate_submission checked it; kept for type checkers
        raise ValidationError("priority must be one of high, normal, low", field="priority")
    every = None if ticks.every_seconds is None else float(ticks.every_seconds)
    return dataclasses.replace(spec, cron=ticks.cron, every_seconds=every)


@dataclass(frozen=True, slots=True)
class Stored:
    """A schedule as its hash holds it."""

    spec: PeriodicSpec
    tag: str
    hash: dict[str, str] = field(default_factory=dict)

    @property
    def paused(self) -> bool:
        return self.hash.get("paused") == "1"

    @property
    def rev(self) -> str:
        """The revision read: every change and every fire but a trigger's makes a new one."""
        return self.hash.get("rev") or "0"

    @property
    def next_ms(self) -> int | None:
        raw = self.hash.get("next") or ""
        return int(raw) if raw.isdigit() else None

    def runs(self) -> builtins.list[dict[str, Any]]:
        try:
            runs = json.loads(self.hash.get("runs") or "[]")
        except ValueError:
            return []
        return runs if isinstance(runs, builtins.list) else []


def stored_from_hash(name: str, tag: str, raw: dict[str, str], config: Any = None) -> Stored:
    """The schedule its hash holds; with config, its payload opened where that config can (opened)."""
    spec = PeriodicSpec(name=name, **json.loads(raw["spec"]))
    return Stored(spec=spec if config is None else opened(config, spec), tag=tag, hash=raw)


def opened(config: Any, spec: PeriodicSpec) -> PeriodicSpec:
    """The spec with its payload decrypted when config encrypts its type and a key opens it;
    otherwise as stored, a sealed payload kept sealed (a plain type's is what it is)."""
    if not (is_sealed(spec.payload) and encrypts(config.encrypt_types, spec.type)):
        return spec
    try:
        return dataclasses.replace(spec, payload=unseal(config.encryption_keys, spec.payload))
    except DecryptionFailed:
        return spec  # written back as it is (task_fields), never sealed twice


def stored_payload(stored: Stored) -> Any:
    """The payload as the hash holds it: sealed for an encrypted type."""
    try:
        return json.loads(stored.hash["spec"]).get("payload")
    except (KeyError, ValueError, AttributeError):
        return stored.spec.payload


class Periodic(Noun):
    """The periodic schedules: CRUD, pause/resume/trigger, and the worker-start sync."""

    def __init__(self, plumbing: Plumbing, audit: Audit, registry: Registry, tasks: Tasks) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.registry = registry
        self.tasks = tasks

    # -- reads ------------------------------------------------------------------------------------
    def list(self) -> builtins.list[dict[str, Any]]:
        """Every schedule's representation, sorted by name (three round trips)."""
        return [self._view(s, statuses) for s, statuses in self._with_statuses(self._load_all())]

    def get(self, name: str) -> dict[str, Any]:
        [(stored, statuses)] = self._with_statuses([self._load(name)])
        return self._view(stored, statuses)

    def names(self) -> dict[str, str]:
        """Schedule name -> the partition tag that holds it."""
        return text_hash(self.client.hgetall(self.keys.periodic_registry()))

    def _load(self, name: str) -> Stored:
        found = self.client.hget(self.keys.periodic_registry(), name) if isinstance(name, str) else None
        tag = optional_text(found)
        raw = text_hash(self.client.hgetall(self.keys.periodic(tag, name))) if tag else {}
        if tag is None or not raw.get("spec"):
            raise PeriodicNotFound(f"periodic schedule {name!r} not found", name=name)
        return stored_from_hash(name, tag, raw, self.config)

    def _load_all(self) -> builtins.list[Stored]:
        names = sorted(self.names().items())
        pipe = self.client.pipeline(transaction=False)
        for name, tag in names:
            pipe.hgetall(self.keys.periodic(tag, name))
        out = []
        for (name, tag), raw in zip(names, pipe.execute(raise_on_error=False), strict=True):
            if isinstance(raw, dict) and raw.get("spec"):
                try:
                    out.append(stored_from_hash(name, tag, text_hash(raw), self.config))
                except (ValueError, TypeError):
                    logger.warning("periodic schedule %r: its stored spec does not parse; skipped", name)
        return out

    def _with_statuses(self, schedules: builtins.list[Stored]) -> builtins.list[tuple[Stored, builtins.list[Any]]]:
        """Each schedule with the current status of the tasks its last runs fired."""
        pipe = self.client.pipeline(transaction=False)
        wanted: builtins.list[builtins.list[str]] = []
        for stored in schedules:
            ids = [str(run.get("task_id") or "") for run in stored.runs()]
            wanted.append(ids)
            for task_id in ids:
                if task_id:
                    pipe.hget(self.keys.task(task_id), "status")
        replies = iter(pipe.execute(raise_on_error=False) if any(any(ids) for ids in wanted) else [])
        out = []
        for stored, ids in zip(schedules, wanted, strict=True):
            statuses = [next(replies) if task_id else None for task_id in ids]
            out.append((stored, [s if isinstance(s, str) else None for s in statuses]))
        return out

    def _view(self, stored: Stored, statuses: builtins.list[str | None]) -> dict[str, Any]:
        spec, h = stored.spec, stored.hash
        # Shown as a task's is: the plaintext where this process has the key, else "encrypted".
        payload, sealed = reveal(stored_payload(stored), spec.type)
        runs = []
        for run, status in zip(stored.runs(), statuses, strict=False):
            task_id = run.get("task_id") or None
            runs.append({
                "scheduled_for": iso(run.get("scheduled_for")),
                "task_id": task_id,
                # A run that fired no task says why (SKIPPED: overlap=skip; QUEUE_FULL); a task
                # whose record has expired (DTQ_TASK_RETENTION_S) reads UNKNOWN.
                "status": (status or "UNKNOWN") if task_id else (run.get("outcome") or "SKIPPED"),
                "fired_at": iso(run.get("fired_at")),
                "kind": run.get("kind") or "tick",  # tick | catch_up (misfire=run_once) | trigger
                # Ticks a catch_up or missed run stands for (a cron's counted up to firing.MAX_COUNTED).
                "missed": int(run.get("missed") or 0),
            })
        view = {
            "name": spec.name, "type": spec.type, "payload": payload, "queue": spec.queue,
            "priority": spec.priority, "cron": spec.cron, "timezone": spec.timezone,
            "every_seconds": spec.every_seconds, "overlap": spec.overlap, "misfire": spec.misfire,
            "max_attempts": spec.max_attempts, "timeout_seconds": spec.timeout_seconds,
            "paused": stored.paused, "paused_at": iso(h.get("paused_at") or None) if stored.paused else None,
            "paused_by": (h.get("paused_by") or None) if stored.paused else None,
            "source": spec.source, "description": spec.description(),
            "next_run_at": None if stored.paused or stored.next_ms is None else iso(stored.next_ms),
            "created_at": iso(h.get("created_at") or None), "updated_at": iso(h.get("updated_at") or None),
            "last_runs": runs,
        }
        if sealed:
            view["encrypted"] = True
        return view

    # -- changes ----------------------------------------------------------------------------------
    def create(self, spec: PeriodicSpec, *, actor: Actor) -> dict[str, Any]:
        """Add a schedule; PeriodicExists when the name is taken. Its first tick is the first
        after now. Registers its queue when new (QueueLimitReached past DTQ_MAX_QUEUES)."""
        spec = self._checked(spec)
        with self.audit.operation(actor, "periodic.create", f"periodic:{spec.name}", selected=1,
                                  selection={"name": spec.name}) as op:
            self._create(spec)
            op.done = 1
        return self.get(spec.name)

    def _create(self, spec: PeriodicSpec, *, carry: dict[str, str] | None = None) -> None:
        """Write a new schedule (carry: state moved from its previous partition)."""
        layout = self.registry.ensure(spec.queue)
        tag = layout.tags[0]
        registry = self.keys.periodic_registry()
        if not self.client.hsetnx(registry, spec.name, tag):
            held = optional_text(self.client.hget(registry, spec.name))
            if held and self.client.exists(self.keys.periodic(held, spec.name)):
                raise PeriodicExists(f"periodic schedule {spec.name!r} exists already", name=spec.name)
            self.client.hset(registry, spec.name, tag)  # a create cut short left the name behind
        now = self.redis_now_ms()
        state = dict(carry or {})
        paused = state.get("paused") == "1"
        next_ms = int(state["next"]) if (state.get("next") or "").isdigit() else spec.ticks.next_after(now)
        fields: dict[str, object] = {**self._spec_fields(spec), "paused": "1" if paused else "0",
                                     "next": "" if paused else next_ms}
        for kept in ("runs", "last_task", "paused_at", "paused_by", "paused_next", "created_at"):
            if state.get(kept):
                fields[kept] = state[kept]
        try:
            self._save(layout, spec.name, "create", fields, now=now)
        except PeriodicExists:
            raise  # a concurrent create of the same name won: the registry entry is its
        except BaseException:
            # Nothing was written in the partition: the name is free again, unless another
            # create has taken it meanwhile.
            if not self.client.exists(self.keys.periodic(tag, spec.name)):
                self.client.hdel(registry, spec.name)
            raise

    def update(self, name: str, changes: dict[str, Any], *, actor: Actor, _sync: bool = False) -> dict[str, Any]:
        """PATCH a schedule: the fields given change, the others stay. A changed schedule (cron,
        timezone, every_seconds) takes effect from its next tick after now; other changes
        (payload, queue, priority, ...) from the next tick fired. A schedule declared in code
        refuses (PeriodicDeclaredInCode): a deploy changes it. Another change landing at the same
        time (another operator's PATCH, a resume) is kept: this one is merged onto it."""
        stored = self._load(name)
        self._merged(stored, changes, _sync=_sync)  # a change refused is refused before it is audited
        with self.audit.operation(actor, "periodic.update", f"periodic:{name}", selected=1,
                                  selection={"name": name, "changes": sorted(changes)}) as op:
            op.done = self._settle(name, stored, lambda s: self._apply(s, self._merged(s, changes, _sync=_sync)))
        return self.get(name)

    def _merged(self, stored: Stored, changes: Any, *, _sync: bool) -> PeriodicSpec:
        """The stored spec with the changes, checked."""
        if stored.spec.source == "code" and not _sync:
            raise PeriodicDeclaredInCode(f"periodic schedule {stored.spec.name!r} is declared in code: change it "
                                         "there (the next worker start applies it)", name=stored.spec.name)
        if not isinstance(changes, dict):
            raise ValidationError("changes must be a JSON object", field=None)
        unknown = sorted(set(changes) - CHANGEABLE)
        if unknown:
            raise ValidationError(f"field {unknown[0]!r} cannot be changed", field=unknown[0])
        if ("payload" in changes and is_sealed(stored.spec.payload) and token_shaped(stored.spec.payload)
                and not encrypts(self.config.encrypt_types, stored.spec.type)):
            # A process that does not encrypt the type (a web node given no key) would store the
            # new payload in clear where the old one was sealed.
            raise ValidationError("this schedule's payload is encrypted: change it from a process with "
                                  "DTQ_ENCRYPTION_KEYS and DTQ_ENCRYPT_TYPES listing its type", field="payload")
        merged = dataclasses.replace(stored.spec, **changes)
        if "cron" in changes and changes["cron"] is not None and "every_seconds" not in changes:
            merged = dataclasses.replace(merged, every_seconds=None)
        if "every_seconds" in changes and changes["every_seconds"] is not None and "cron" not in changes:
            merged = dataclasses.replace(merged, cron=None, timezone="UTC" if "timezone" not in changes
                                         else merged.timezone)
        return self._checked(merged, check_type=not _sync)

    def _apply(self, stored: Stored, spec: PeriodicSpec) -> int:
        if spec.queue != stored.spec.queue:
            self._move(stored, spec)
            return 1
        now = self.redis_now_ms()
        fields: dict[str, object] = self._spec_fields(spec)
        schedule_changed = any(getattr(spec, f) != getattr(stored.spec, f) for f in SCHEDULE_FIELDS)
        if not stored.paused and (schedule_changed or stored.next_ms is None):
            fields["next"] = spec.ticks.next_after(now)
        self._save(self._layout_of(stored), spec.name, "update", fields, now=now, rev=stored.rev)
        return 1

    def _move(self, stored: Stored, spec: PeriodicSpec) -> None:
        """To another queue, so another partition: dropped from the old one first (never two
        partitions that can fire it), as it was read (a change made since is not carried over
        stale), then written in the new one with its state. A target queue that cannot be made
        (QUEUE_LIMIT_REACHED) refuses before anything is dropped; a write to the new partition
        that fails puts the schedule back where it was."""
        self.registry.ensure(spec.queue)
        state = self._drop(stored.tag, spec.name, rev=stored.rev)
        carry = dict(state)
        schedule_changed = any(getattr(spec, f) != getattr(stored.spec, f) for f in SCHEDULE_FIELDS)
        if schedule_changed:
            carry.pop("next", None)
        self.client.hdel(self.keys.periodic_registry(), spec.name)
        try:
            self._create(spec, carry=carry)
        except PeriodicExists:
            raise  # another create took the name in between: it is that schedule's now
        except Exception:
            try:
                self._create(stored.spec, carry=state)
            except Exception:
                # The spec as stored: an encrypted type's payload stays sealed in the log too.
                logger.exception("periodic schedule %r: its move to queue %r failed and it could not be put "
                                 "back in queue %r; create it again (its spec: %s)", spec.name, spec.queue,
                                 stored.spec.queue, stored.hash.get("spec") or "")
            raise

    def delete(self, name: str, *, actor: Actor, _sync: bool = False) -> None:
        """Remove a schedule: it fires nothing from now on (a fire running concurrently either
        finished before, or finds it gone). The tasks it fired are left alone."""
        stored = self._load(name)
        if stored.spec.source == "code" and not _sync:
            raise PeriodicDeclaredInCode(f"periodic schedule {name!r} is declared in code: remove it there "
                                         "(the next worker start retires it)", name=name)
        with self.audit.operation(actor, "periodic.delete", f"periodic:{name}", selected=1,
                                  selection={"name": name}) as op:
            try:
                self._drop(stored.tag, name)
            except PeriodicNotFound:
                pass  # a concurrent delete won: the registry entry below is what remains
            self.client.hdel(self.keys.periodic_registry(), name)
            op.done = 1

    def pause(self, name: str, *, actor: Actor) -> dict[str, Any]:
        """Stop firing until resumed (a paused schedule fires nothing; triggers still run).
        Pausing a paused schedule changes nothing (count 0)."""
        stored = self._load(name)
        with self.audit.operation(actor, "periodic.pause", f"periodic:{name}", selected=1,
                                  selection={"name": name}) as op:
            op.done = self._settle(name, stored, lambda s: 0 if s.paused else self._pause(s, actor))
        return self.get(name)

    def _pause(self, stored: Stored, actor: Actor) -> int:
        now = self.redis_now_ms()
        # The tick it would have fired next is kept: misfire=run_once catches up from it.
        self._save(self._layout_of(stored), stored.spec.name, "update",
                   {"paused": "1", "paused_at": now, "paused_by": actor.name,
                    "paused_next": stored.next_ms if stored.next_ms is not None else now}, now=now, rev=stored.rev)
        return 1

    def resume(self, name: str, *, actor: Actor) -> dict[str, Any]:
        """Fire again from the next tick after now. misfire decides what becomes of the ticks
        that passed while paused: skip: none fires; run_once: one task fires now for all of them
        (scheduled_for: the first of them), unless overlap=skip and the last run is unfinished.
        Resuming a running schedule changes nothing (count 0): of two resumes at once, one
        resumes and fires the catch-up, the other finds it running."""
        stored = self._load(name)
        with self.audit.operation(actor, "periodic.resume", f"periodic:{name}", selected=1,
                                  selection={"name": name}) as op:
            op.done = self._settle(name, stored, lambda s: self._resume(s) if s.paused else 0)
        return self.get(name)

    def _resume(self, stored: Stored) -> int:
        # One script resumes and fires the catch-up: only while still paused at the revision read.
        layout = self._layout_of(stored)
        now = self.redis_now_ms()
        ticks = stored.spec.ticks
        held = stored.hash.get("paused_next") or ""
        catch_up = None
        if stored.spec.misfire == "run_once" and held.isdigit() and int(held) <= now:
            catch_up = (int(held), count_ticks(ticks, int(held), now))
        self._fire(stored, self.fire_args(stored.tag, layout, stored.spec.name, "", None, "", now, rev=stored.rev,
                                          resume_to=ticks.next_after(now), catch_up=catch_up,
                                          busy_elsewhere=self._busy_elsewhere(stored)))
        return 1

    def trigger(self, name: str, *, actor: Actor) -> dict[str, Any]:
        """Fire one task now (scheduled_for = now), paused or not, whatever overlap says; not a
        tick: next_run_at stays. Returns {"task_id", "scheduled_for", "name"}."""
        stored = self._load(name)
        layout = self._layout_of(stored)
        with self.audit.operation(actor, "periodic.trigger", f"periodic:{name}", selected=1,
                                  selection={"name": name}) as op:
            now = self.redis_now_ms()
            created = self._fire(stored, self.fire_args(stored.tag, layout, name, "", None, "", now))
            if not created:  # the partition is full (DTQ_MAX_QUEUE_DEPTH): the run says QUEUE_FULL
                raise_for_code(ErrorCode.QUEUE_FULL, task_id=None, script="firePeriodic", queue=stored.spec.queue,
                               count=self.tasks.depth_limit(layout), max_depth=self.config.max_queue_depth)
            op.done = 1
        return {"name": name, "task_id": str(created[0]), "scheduled_for": iso(now)}

    def fire_args(self, tag: str, layout: Layout | None, name: str, worker_id: str, fire: FirePlan | None,
                  misfire: str, now_ms: int, *, rev: str = "", busy_elsewhere: bool = False,
                  resume_to: int | None = None, catch_up: tuple[int, int] | None = None) -> builtins.list[object]:
        """firePeriodic-1's arguments with this engine's settings (retention, marker TTL, depth)."""
        depth = self.tasks.depth_limit(layout) if layout is not None else self.config.max_queue_depth
        return fire_args(tag=tag, worker_id=worker_id, name=name, rev=rev, fire=fire, misfire=misfire,
                         now_ms=now_ms, retention_ms=self.config.task_retention_s * 1000,
                         marker_ttl_ms=self.config.idem_ttl_s * 1000, max_depth=depth, recent_cap=RECENT_CAP,
                         busy_elsewhere=busy_elsewhere, resume_to=resume_to, catch_up=catch_up)

    # -- worker start -------------------------------------------------------------------------------
    def sync_declared(self, specs: builtins.list[PeriodicSpec], *, served_types: frozenset[str] | None = None
                      ) -> dict[str, builtins.list[str]]:
        """Make Redis hold the schedules declared in code (source="code"): add the new ones,
        change the changed ones (paused state and history kept), retire the ones no longer
        declared. Schedules made through the API are never touched; a declared name taken by
        one is reported as a conflict and left alone.

        served_types: the task types of the worker syncing. It retires only schedules firing a
        type it serves, so a worker deployed with other code (another set of handlers) does not
        retire the schedules of the deployment that declares them. None: retire any.
        """
        declared: dict[str, PeriodicSpec] = {}
        for spec in specs:
            spec = self._checked(dataclasses.replace(spec, source="code"), check_type=False)
            declared[spec.name] = spec
        current = {s.spec.name: s for s in self._load_all()}
        report: dict[str, builtins.list[str]] = {"added": [], "changed": [], "retired": [], "unchanged": [],
                                                 "conflicts": [], "failed": []}
        actor = Actor(name="code:sync", source="worker")
        for name, spec in sorted(declared.items()):
            stored = current.get(name)
            if stored is not None and stored.spec.source != "code":
                logger.warning("periodic schedule %r is declared in code and was created through the API: "
                               "the API's one is kept; rename one of them", name)
                report["conflicts"].append(name)
                continue
            if stored is not None and stored.spec == spec and not self._to_seal(stored):
                report["unchanged"].append(name)
                continue
            # One schedule that cannot be written (its queue past DTQ_MAX_QUEUES, Redis refusing)
            # does not keep the worker from starting, nor the others from syncing: it is logged.
            try:
                with self.audit.operation(actor, "periodic.create" if stored is None else "periodic.update",
                                          f"periodic:{name}", selected=1, selection={"name": name}) as op:
                    if stored is None:
                        self._create(spec)
                    else:
                        self._settle(name, stored, functools.partial(self._apply, spec=spec))
                    op.done = 1
            except PeriodicExists:
                report["unchanged"].append(name)  # another worker starting at once added it
                continue
            except DtqError as exc:
                logger.error("periodic schedule %r declared in code could not be synced: %s", name, exc.message)
                report["failed"].append(name)
                continue
            report["added" if stored is None else "changed"].append(name)
        for name, stored in sorted(current.items()):
            if name in declared or stored.spec.source != "code":
                continue
            if served_types is not None and stored.spec.type not in served_types:
                continue
            try:
                self.delete(name, actor=actor, _sync=True)
            except PeriodicNotFound:
                continue  # another worker starting at once retired it
            except DtqError as exc:
                logger.error("periodic schedule %r could not be retired: %s", name, exc.message)
                report["failed"].append(name)
                continue
            report["retired"].append(name)
        return report

    def _to_seal(self, stored: Stored) -> bool:
        """Whether a declared schedule's write is due for its payload's sake though its spec is
        unchanged: its type is encrypted now and it was stored in clear, or sealed with a key that
        no longer encrypts (a rotation: sealed again, the old key can be dropped)."""
        if stored.spec.payload is None or not encrypts(self.config.encrypt_types, stored.spec.type):
            return False
        raw = stored_payload(stored)
        return not is_sealed(raw) or not sealed_with_first(self.config.encryption_keys, raw)

    # -- plumbing -----------------------------------------------------------------------------------
    def _spec_fields(self, spec: PeriodicSpec) -> dict[str, object]:
        """The hash fields a spec sets: the spec itself, and what firePeriodic-1 reads of it."""
        fired = task_fields(self.config, spec)
        if spec.payload is not None and encrypts(self.config.encrypt_types, spec.type):
            # The spec holds the payload as the tasks get it: sealed, the same token.
            spec = dataclasses.replace(spec, payload=json.loads(fired[fired.index("payload") + 1]))
        return {"spec": _spec_json(spec), "overlap": spec.overlap,
                "task_fields": json.dumps(fired, separators=(",", ":"), ensure_ascii=False)}

    def _checked(self, spec: PeriodicSpec, *, check_type: bool = True) -> PeriodicSpec:
        spec = validate_spec(self.config, spec)
        if check_type:  # the type it fires must be served, as a submit's must (UnknownTaskType)
            self.tasks.check_type(spec.type)
        return spec

    def _layout_of(self, stored: Stored) -> Layout:
        layout = self.registry.get(stored.spec.queue, fresh=True)
        if layout is None or not layout.tags or layout.tags[0] != stored.tag:
            # Its queue was deleted (and maybe created again) under it: nothing can be written there.
            raise PartitionClosed(f"the queue {stored.spec.queue!r} of periodic schedule {stored.spec.name!r} "
                                  "no longer holds it", queue=stored.spec.queue)
        return layout

    def _settle(self, name: str, stored: Stored, change: Callable[[Stored], int]) -> int:
        """Run change on the schedule as read; its write is a compare-and-set on the revision
        read. When another change landed in between (an operator's in another process, a
        leader's fire, a move to another queue), read the schedule again and run change on
        that, so that both hold. Returns what change returns: how many it changed (0 or 1)."""
        for _ in range(ATTEMPTS):
            try:
                return change(stored)
            except (_Stale, PeriodicNotFound):
                stored = self._load(name)  # PeriodicNotFound from here: it was deleted
        raise PeriodicConflict(f"periodic schedule {name!r} kept changing while this change was made "
                               f"({ATTEMPTS} attempts): nothing of it was written; retry", name=name)

    def _busy_elsewhere(self, stored: Stored) -> bool:
        """Whether overlap=skip holds back a catch-up because the last task, left in another
        partition by a move to another queue (which firePeriodic-1 may not read on a cluster),
        is not finished."""
        last = stored.hash.get("last_task") or ""
        if stored.spec.overlap != "skip" or not is_task_id(last) or tag_of(last) == stored.tag:
            return False
        status = optional_text(self.client.hget(self.keys.task(last), "status"))
        return status is not None and status not in TERMINAL

    def _save(self, layout: Layout, name: str, mode: str, fields: dict[str, object], *, now: int,
              rev: str = "") -> dict[str, str]:
        """savePeriodic-1; _Stale when the revision is no longer rev (an update)."""
        flat: builtins.list[object] = []
        for key, value in fields.items():
            flat += [key, value]
        reply = self.scripts("savePeriodic", keys=[self.keys.partition(layout.tags[0])],
                             args=[name, mode, layout.owner, now, rev, *flat])
        code = int(reply[0])
        if code == ErrorCode.PARTITION_CLOSED:
            self.registry.forget_cache()
        raise_for_code(code, task_id=None, script="savePeriodic", queue=layout.queue, name=name)
        if not int(reply[2]):
            raise _Stale(name)
        return _pairs(reply[1])

    def _fire(self, stored: Stored, args: builtins.list[object]) -> builtins.list[str]:
        """firePeriodic-1 for an operator (trigger, resume): the task ids created; _Stale when a
        resume found the schedule changed (or resumed) since it was read."""
        reply = self.scripts("firePeriodic", keys=[self.keys.partition(stored.tag)], args=args)
        code = int(reply[0])
        if code == ErrorCode.PARTITION_CLOSED:
            self.registry.forget_cache()
        raise_for_code(code, task_id=None, script="firePeriodic", queue=stored.spec.queue, name=stored.spec.name)
        if not int(reply[2]):
            raise _Stale(stored.spec.name)
        return [str(task_id) for task_id in reply[1]]

    def _drop(self, tag: str, name: str, *, rev: str = "") -> dict[str, str]:
        """dropPeriodic-1: the hash as it was; _Stale when the revision is no longer rev ('' any)."""
        reply = self.scripts("dropPeriodic", keys=[self.keys.partition(tag)], args=[name, rev])
        raise_for_code(int(reply[0]), task_id=None, script="dropPeriodic", name=name)
        if not int(reply[2]):
            raise _Stale(name)
        return _pairs(reply[1])


def _spec_json(spec: PeriodicSpec) -> str:
    return json.dumps(spec.spec_fields(), separators=(",", ":"), sort_keys=True, allow_nan=False)


def task_fields(config: Any, spec: PeriodicSpec) -> builtins.list[str]:
    """The record fields of a task the schedule fires, as a submit of it would write them
    (engine/tasks.py), less the tick's own (periodic_name, scheduled_for: the script's)."""
    s = validate_submission(config, spec.type, spec.payload, queue=spec.queue, priority=spec.priority,
                            max_attempts=spec.max_attempts, timeout_seconds=spec.timeout_seconds)
    payload_json = s.payload_json  # sealed by the submit's check when config encrypts the type
    if is_sealed(spec.payload) and token_shaped(spec.payload) and encrypts(config.encrypt_types, spec.type):
        payload_json = json.dumps(spec.payload)  # a token no key here opens (opened): kept, not sealed twice
    return ["type", s.type, "queue", s.queue, "priority", s.priority, "payload", payload_json,
            "max_attempts", str(s.max_attempts), "timeout_s", f"{s.timeout_s:g}"]


def _pairs(flat: builtins.list[Any]) -> dict[str, str]:
    return dict(zip(flat[::2], flat[1::2], strict=True))
