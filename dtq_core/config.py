"""The validated dtq configuration: one frozen value built from the environment or settings.

`read_env` is what dtq_site.settings calls at import (through conf.read_environment, as does a
project without settings.DTQ when its apps load), so every entry point (manage.py, daphne, pytest)
stops at start with one clear line naming the bad variable instead of a traceback.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from .encryption import check_keys
from .faults import POINTS as FAULT_POINTS
from .redis_url import RedisUrlError, parse, redacted
from .task import valid_queue_name

EVENT_MODES = ("auto", "always", "off")
CPU_AFFINITY_MODES = ("auto", "off")  # DTQ_WORKER_CPU_AFFINITY (dtq_core/worker/affinity.py)
KEEP_PAYLOAD = ("failed", "all")  # DTQ_KEEP_PAYLOAD: whose payload a finished record keeps


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the variable."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DtqConfig:
    redis_url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "dtq"
    visibility_timeout_s: float = 30.0
    heartbeat_interval_s: float = 5.0
    drain_timeout_s: float = 30.0
    task_retention_s: int = 604800
    result_retention_s: int = 3600
    # How finished tasks are kept (dtq_core/scripts/includes/retain.lua; docs/deployment.md, "Redis
    # memory"): SUCCEEDED, CANCELLED and EXPIRED records compacted and kept this long and at most
    # this many per queue partition; FAILED and DEAD_LETTERED kept whole for DTQ_TASK_RETENTION_S
    # and at most this many per partition (never fewer than DTQ_DLQ_MAXLEN). A count of 0: no
    # count bound. DTQ_KEEP_PAYLOAD: "failed" drops the payload (and error history) of succeeded,
    # cancelled and expired tasks; "all" keeps every record whole.
    succeeded_retention_s: int = 86400
    succeeded_retention_count: int = 10000
    failed_retention_count: int = 10000
    keep_payload: str = "failed"
    result_max_bytes: int = 65536
    idem_ttl_s: int = 86400
    max_queue_depth: int = 100000
    max_queues: int = 1000
    dlq_enabled: bool = True
    dlq_maxlen: int = 10000
    audit_maxlen: int = 10000
    max_attempts: int = 5
    retry_base_s: float = 1.0
    retry_max_s: float = 300.0
    task_timeout_s: float = 300.0
    payload_max_bytes: int = 1048576
    # Most steps one workflow may have (dtq_core/workflow_spec.py).
    workflow_max_steps: int = 20000
    # A running task's ctx.progress() is written at most once per this many seconds (the latest
    # value wins): a handler's tight loop cannot flood Redis or the console (worker/progress.py).
    progress_min_interval_s: float = 0.5
    api_key: str = dataclasses.field(default="", repr=False)  # a printed config must not show it
    # Destructive API calls with no key and no staff session: refused unless explicitly turned on.
    allow_anonymous_admin: bool = False
    task_modules: tuple[str, ...] = ()
    # Dotted paths of middleware classes (dtq_core/middleware.py): run on every enqueue, and
    # around every attempt of a handler. Empty: the hot path pays one check each.
    enqueue_middleware: tuple[str, ...] = ()
    execution_middleware: tuple[str, ...] = ()
    # Encrypted payloads and results (dtq_core/encryption.py): Fernet keys, the first encrypts;
    # the task types encrypted ("*": all). Kept out of repr: a config printed must not show keys.
    encryption_keys: tuple[str, ...] = dataclasses.field(default=(), repr=False)
    encrypt_types: tuple[str, ...] = ()
    # OpenTelemetry and Sentry (dtq_core/integrations/): "auto" is on when the library is there
    # (and, for Sentry, initialised); "off". Sentry reports retried attempts only when asked.
    opentelemetry: str = "auto"
    sentry: str = "auto"
    sentry_report_retries: bool = False
    # DTQ_QUEUE_PARTITIONS "q=n,...": queues split into n partitions (one hash slot each); others 1.
    queue_partitions: tuple[tuple[str, int], ...] = ()
    # True: submit accepts task types no worker has registered (they dead-letter when run).
    accept_unknown_types: bool = False
    # An acknowledged write (submit, completion, operator action) waits until this many replicas
    # have it (WAIT), at most redis_wait_timeout_ms; 0: no wait (docs/deployment.md).
    redis_min_replicas: int = 0
    redis_wait_timeout_ms: int = 1000
    # Task events on the events channel: "auto" only while a listener (the console's feed) has
    # announced itself, "always", or "off" (dtq_core/events.py).
    events: str = "auto"
    # A worker busy with short sync handlers keeps its threads on one CPU at a time ("auto") or
    # leaves them to the OS ("off"): dtq_core/worker/affinity.py.
    worker_cpu_affinity: str = "auto"
    # Internal knobs (not in the contract) that tests shrink so crash scenarios take seconds.
    scheduler_lock_ttl_s: float = 10.0
    stale_claim_s: float = 60.0
    scheduler_interval_s: float = 0.25
    cancel_poll_s: float = 0.25
    redis_timeout_s: float = 1.0
    # Test-only: a fault point (dtq_core/faults.py) where the worker stops itself. Empty: none.
    test_fault: str = ""

    def __post_init__(self) -> None:
        _check_url(self.redis_url)
        numeric = [f.name for f in dataclasses.fields(self) if type(f.default) in (int, float)]
        for name in numeric:  # every numeric setting, including ones added later
            _check_finite(env_name(name), getattr(self, name))
        positive = (
            "visibility_timeout_s", "heartbeat_interval_s", "task_retention_s",
            "result_retention_s", "succeeded_retention_s", "result_max_bytes", "idem_ttl_s", "dlq_maxlen",
            "audit_maxlen",
            "max_attempts", "retry_base_s", "retry_max_s", "task_timeout_s", "payload_max_bytes",
            "workflow_max_steps",
            "scheduler_lock_ttl_s", "stale_claim_s", "scheduler_interval_s", "cancel_poll_s",
            "redis_timeout_s", "redis_wait_timeout_ms",
        )
        for name in positive:
            if getattr(self, name) <= 0:
                raise ConfigError(f"{env_name(name)} must be greater than 0 (got {getattr(self, name)})")
        for name in numeric:  # no dtq duration, size or count means anything below 0
            if getattr(self, name) < 0:
                raise ConfigError(f"{env_name(name)} must be 0 or more (got {getattr(self, name)})")
        for name in ("redis_min_replicas", "redis_wait_timeout_ms"):  # sent to Redis's WAIT as they are
            if not float(getattr(self, name)).is_integer():
                raise ConfigError(f"{env_name(name)} must be a whole number (got {getattr(self, name)})")
        if self.heartbeat_interval_s >= self.visibility_timeout_s:
            raise ConfigError(
                f"DTQ_HEARTBEAT_INTERVAL_S ({self.heartbeat_interval_s:g}) must be less than "
                f"DTQ_VISIBILITY_TIMEOUT_S ({self.visibility_timeout_s:g})"
            )
        if self.keep_payload not in KEEP_PAYLOAD:
            raise ConfigError(f"DTQ_KEEP_PAYLOAD must be one of {', '.join(KEEP_PAYLOAD)} (got {self.keep_payload!r})")
        for name in ("succeeded_retention_s", "succeeded_retention_count", "failed_retention_count"):
            if not float(getattr(self, name)).is_integer():
                raise ConfigError(f"{env_name(name)} must be a whole number (got {getattr(self, name)})")
        if self.retry_max_s < self.retry_base_s:
            raise ConfigError("DTQ_RETRY_MAX_S must be at least DTQ_RETRY_BASE_S")
        if self.test_fault and self.test_fault not in FAULT_POINTS:
            raise ConfigError(f"DTQ_TEST_FAULT must be empty or one of {', '.join(FAULT_POINTS)} "
                              f"(got {self.test_fault!r})")
        if self.allow_anonymous_admin and self.api_key:
            raise ConfigError("DTQ_ALLOW_ANONYMOUS_ADMIN=true cannot be combined with DTQ_API_KEY (a set key is "
                              "always required): unset one of them")
        if not isinstance(self.accept_unknown_types, bool):
            raise ConfigError(f"DTQ_ACCEPT_UNKNOWN_TYPES must be true or false (got {self.accept_unknown_types!r})")
        for name in ("opentelemetry", "sentry"):
            if getattr(self, name) not in ("auto", "off"):
                raise ConfigError(f"{env_name(name)} must be auto or off (got {getattr(self, name)!r})")
        if self.worker_cpu_affinity not in CPU_AFFINITY_MODES:
            raise ConfigError(f"DTQ_WORKER_CPU_AFFINITY must be one of {', '.join(CPU_AFFINITY_MODES)} "
                              f"(got {self.worker_cpu_affinity!r})")
        if self.events not in EVENT_MODES:
            raise ConfigError(f"DTQ_EVENTS must be one of {', '.join(EVENT_MODES)} (got {self.events!r})")
        _check_partitions(self.queue_partitions)
        problem = check_keys(self.encryption_keys)
        if problem:
            raise ConfigError(problem)
        if self.encrypt_types and not self.encryption_keys:
            raise ConfigError("DTQ_ENCRYPT_TYPES is set but DTQ_ENCRYPTION_KEYS is empty: give at least one Fernet key")
        if not re.fullmatch(r"[A-Za-z0-9_.:-]{1,64}", self.key_prefix):
            raise ConfigError(f"DTQ_KEY_PREFIX must be 1-64 of A-Z a-z 0-9 _ . : - (got {self.key_prefix!r})")

    def __repr__(self) -> str:
        # The dataclass's repr, with the Redis URL's passwords masked as the worker's start line
        # masks them: a config printed in a log or a traceback must not show them.
        shown = (f"{f.name}={redacted(self.redis_url) if f.name == 'redis_url' else getattr(self, f.name)!r}"
                 for f in dataclasses.fields(self) if f.repr)
        return f"{type(self).__name__}({', '.join(shown)})"

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> DtqConfig:
        """Build from a settings.DTQ-style dict with upper-case keys (REDIS_URL, ...)."""
        known = {f.name for f in dataclasses.fields(cls)}
        kwargs = {k.lower(): v for k, v in values.items() if k.lower() in known}
        for name in LIST_FIELDS:
            if isinstance(kwargs.get(name), str):
                kwargs[name] = _split_modules(kwargs[name])
            elif name in kwargs:
                kwargs[name] = tuple(kwargs[name])
        if "queue_partitions" in kwargs:
            kwargs["queue_partitions"] = parse_partitions(kwargs["queue_partitions"])
        return cls(**kwargs)

    @property
    def retention_arg(self) -> str:
        """The retention argument of the scripts that end tasks (includes/retain.lua,
        retention_policy). DTQ_TASK_RETENTION_S stays the longest any record lives past its last
        update, so a succeeded one's age is at most that. The failed count is never below
        DTQ_DLQ_MAXLEN, so a dead letter still in its DLQ keeps its task record (the retry needs it)."""
        failed = self.failed_retention_count
        if failed and self.dlq_enabled:
            failed = max(failed, self.dlq_maxlen)
        succeeded_s = min(self.succeeded_retention_s, self.task_retention_s)
        return (f"{self.task_retention_s * 1000}:{succeeded_s * 1000}:"
                f"{self.succeeded_retention_count}:{failed}:{self.keep_payload}")

    @property
    def heartbeat_every_s(self) -> float:
        """How often workers actually beat: DTQ_HEARTBEAT_INTERVAL_S, but at least three times per
        visibility timeout, so a freeze that ages a live owner's entries past the timeout always shows
        as a gap in every worker's heartbeats."""
        return min(self.heartbeat_interval_s, self.visibility_timeout_s / 3)

    # The worker's other timings, derived here beside heartbeat_every_s so that they are read and
    # changed together (dtq_core/worker/ uses only these).
    @property
    def beat_gap_s(self) -> float:
        """Longer than this between two of a worker's heartbeats is a gap (docs/failure-modes.md F7).

        With beats every h, an owner's entries are at most F + h old when a freeze of F ends, and
        reclaimable once that passes v: the gap threshold must stay at or under v - h (here at
        most v / 2, as h <= v / 3), and above h by enough to absorb a late beat.
        """
        h, v = self.heartbeat_every_s, self.visibility_timeout_s
        return h + min(max(1.0, h), (v - 2 * h) / 2)

    @property
    def stale_start_s(self) -> float:
        """A claim older than this when its handler is about to start is checked first."""
        return min(1.0, self.visibility_timeout_s / 2)

    @property
    def reaper_every_s(self) -> float:
        """How often a worker's reaper looks for entries idle past the visibility timeout."""
        return max(0.2, min(self.visibility_timeout_s / 4, 5.0))

    @property
    def stale_claim_check_every_s(self) -> float:
        """How often the leader returns scheduler claims older than stale_claim_s."""
        return min(5.0, self.stale_claim_s / 2)

    @property
    def lost_task_sweep_every_s(self) -> float:
        """How often the leader requeues running tasks whose stream entry was lost."""
        return max(0.5, min(self.visibility_timeout_s / 2, 5.0))

    @property
    def partition_reconcile_every_s(self) -> float:
        """How often the leader compares each queue's partitions with DTQ_QUEUE_PARTITIONS (and
        forgets drained partitions)."""
        return max(0.5, min(self.scheduler_lock_ttl_s / 2, 5.0))

    @property
    def worker_record_ttl_s(self) -> float:
        """A worker's registration hash expires this long after its last heartbeat."""
        return max(60.0, self.visibility_timeout_s * 4)

    @property
    def worker_prune_after_s(self) -> float:
        """A worker registration silent this long is removed from the registry."""
        return max(300.0, self.visibility_timeout_s * 10)

    def partitions_of(self, queue: str) -> int:
        """How many partitions DTQ_QUEUE_PARTITIONS gives the queue (1 when it is not listed)."""
        return dict(self.queue_partitions).get(queue, 1)

    def as_settings(self) -> dict[str, Any]:
        return {f.name.upper(): getattr(self, f.name) for f in dataclasses.fields(self)}


def env_name(field: str) -> str:
    return "DTQ_" + field.upper()


def _check_finite(name: str, value: object) -> None:
    """A numeric setting must be a finite number: NaN compares false with everything, so range
    rules alone let it through (a NaN visibility timeout means no entry is ever reclaimed), and
    no dtq duration, size or count is infinite."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} must be a number (got {value!r})")
    if not math.isfinite(value):
        raise ConfigError(f"{name} must be a finite number (got {value!r})")


def _check_url(url: str) -> None:
    try:
        parse(url)
    except RedisUrlError as exc:
        raise ConfigError(str(exc)) from None


MAX_PARTITIONS = 256


def parse_partitions(raw: object) -> tuple[tuple[str, int], ...]:
    """DTQ_QUEUE_PARTITIONS: "q=n,q=n" (or, from settings.DTQ, a dict or pairs) as sorted pairs."""
    if isinstance(raw, str):
        pairs: list[tuple[str, Any]] = []
        for part in (p.strip() for p in raw.split(",")):
            if not part:
                continue
            queue, sep, n = part.partition("=")
            if not sep:
                raise ConfigError(f"DTQ_QUEUE_PARTITIONS must be <queue>=<n>[,<queue>=<n>...] (got {raw!r})")
            try:
                pairs.append((queue.strip(), int(n.strip())))
            except ValueError:
                raise ConfigError(f"DTQ_QUEUE_PARTITIONS: the partition count of {queue.strip()!r} must be an "
                                  f"integer (got {n.strip()!r})") from None
    elif isinstance(raw, dict):
        pairs = list(raw.items())
    else:
        pairs = [(str(queue), n) for queue, n in cast(Iterable[tuple[str, Any]], raw)]
    return tuple(sorted(pairs))


def _check_partitions(pairs: tuple[tuple[str, int], ...]) -> None:
    seen: set[str] = set()
    for queue, n in pairs:
        if not valid_queue_name(queue):
            raise ConfigError(f"DTQ_QUEUE_PARTITIONS names an invalid queue {queue!r} "
                              "(queue names match [a-z0-9][a-z0-9_-]{0,63})")
        if queue in seen:
            raise ConfigError(f"DTQ_QUEUE_PARTITIONS lists {queue!r} twice")
        seen.add(queue)
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_PARTITIONS:
            raise ConfigError(f"DTQ_QUEUE_PARTITIONS: {queue!r} must have 1 to {MAX_PARTITIONS} partitions (got {n!r})")


# Comma-separated in the environment, lists or tuples in settings.DTQ.
LIST_FIELDS = ("task_modules", "enqueue_middleware", "execution_middleware", "encryption_keys", "encrypt_types")


def _split_modules(raw: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in raw.split(",") if part.strip())


def _parse_bool(raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(raw)


_CASTS: dict[type, Callable[[str], Any]] = {int: int, float: float, bool: _parse_bool, str: str}


def read_env(get: Callable[[str], str | None]) -> DtqConfig:
    """Read every DTQ_* variable through `get` (django-environ's raw lookup) and validate.

    Raises ConfigError naming the first bad variable.
    """
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(DtqConfig):
        raw = get(env_name(f.name))
        if raw is None:
            continue
        if f.name in LIST_FIELDS:
            kwargs[f.name] = _split_modules(raw)
            continue
        if f.name == "queue_partitions":
            kwargs[f.name] = parse_partitions(raw)
            continue
        default_type = type(f.default)
        try:
            kwargs[f.name] = _CASTS[default_type](raw.strip()) if default_type is not str else raw.strip()
        except (ValueError, KeyError):
            kind = {int: "an integer", float: "a number", bool: "true or false"}.get(default_type, "valid")
            raise ConfigError(f"{env_name(f.name)} must be {kind} (got {raw!r})") from None
    return DtqConfig(**kwargs)
