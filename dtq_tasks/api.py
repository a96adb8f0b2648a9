"""The `task` decorator, `enqueue` and `enqueue_many`."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from dtq_core import registry
from dtq_core.conf import get_engine
from dtq_core.engine.periodic import PeriodicSpec
from dtq_core.engine.tasks import Enqueued
from dtq_core.errors import DtqError, QueueFull, QueueLimitReached, ValidationError
from dtq_core.periodic_declared import declare
from dtq_core.task import TASK_TYPE_RE
from dtq_core.ticks import BadSchedule, Ticks

F = TypeVar("F", bound=Callable[..., Any])

MANY_PER_ROUND_TRIP = 1000  # enqueue_many's tasks per write: a bound on the command the client builds


def task(name: str) -> Callable[[F], F]:
    """Register a sync or async function as the handler of task type `name`.

    The handler receives the payload as its one argument; `dtq_tasks.current_task()` gives its
    task id, attempt and queue. Sync handlers run in the worker's thread pool, async ones on
    its event loop.
    """
    if not isinstance(name, str) or not TASK_TYPE_RE.fullmatch(name):
        raise ValueError(f"invalid task type name {name!r}")

    def decorate(fn: F) -> F:
        if not callable(fn):  # a worker would only find out when the first task of this type runs
            raise TypeError(f"@dtq_tasks.task({name!r}) must decorate a function, not {type(fn).__name__} {fn!r}")
        registry.register(name, fn)
        try:  # remembered so that dtq_tasks.step(fn, payload) knows the type (docs/tasks.md, "Workflows")
            fn.dtq_task_type = name  # type: ignore[attr-defined]
        except (AttributeError, TypeError):
            pass  # a callable that takes no attributes: steps name its type instead
        return fn

    return decorate


def periodic(
    name: str,
    *,
    cron: str | None = None,
    every_seconds: float | None = None,
    timezone: str = "UTC",
    type: str | None = None,
    payload: Any = None,
    queue: str = "default",
    priority: str = "normal",
    overlap: str = "allow",
    misfire: str = "skip",
    max_attempts: int | None = None,
    timeout_seconds: float | None = None,
) -> Callable[[F], F]:
    """Declare a periodic schedule beside its handler: the decorated function handles task type
    `type` (default: the schedule's name) and the schedule fires one such task per tick, with
    `payload`. Give `cron` (5 fields, or 6 with seconds first; in `timezone`) or `every_seconds`.

    Declared schedules are synced to Redis when a worker starts (added, changed, and retired
    when removed from code): a deploy is the way to change them. docs/tasks.md#periodic-tasks.
    A schedule whose arguments are wrong raises ValueError at import (the worker refuses to
    start, naming it).
    """
    ttype = name if type is None else type
    if not isinstance(name, str) or not TASK_TYPE_RE.fullmatch(name):
        raise ValueError(f"invalid periodic schedule name {name!r}")
    try:
        Ticks(cron=cron, timezone=timezone, every_seconds=every_seconds)
    except BadSchedule as exc:
        raise ValueError(f"@dtq_tasks.periodic({name!r}): {exc}") from None
    spec = PeriodicSpec(name=name, type=ttype, payload=payload, queue=queue, priority=priority, cron=cron,
                        timezone=timezone, every_seconds=every_seconds, overlap=overlap, misfire=misfire,
                        max_attempts=max_attempts, timeout_seconds=timeout_seconds, source="code")
    register_handler = task(ttype)

    def decorate(fn: F) -> F:
        register_handler(fn)
        declare(spec)
        return fn

    return decorate


def enqueue(
    type: str,
    payload: Any = None,
    *,
    queue: str = "default",
    priority: str = "normal",
    delay_seconds: float = 0,
    ttl_seconds: float | None = None,
    max_attempts: int | None = None,
    timeout_seconds: float | None = None,
    idempotency_key: str | None = None,
    group_key: str | None = None,
    unique_key: str | None = None,
    unique_mode: str | None = None,
    unique_window_s: float | None = None,
    headers: dict[str, str] | None = None,
) -> str:
    """Queue up a task and return its id (the first task's id when the idempotency key was seen,
    the existing task's when its unique_key is held: docs/tasks.md, "Unique tasks").

    headers: string pairs the task carries (its handler reads them as current_task().headers).
    Raises dtq_core.errors.ValidationError, PayloadTooLarge, QueueFull, QueueLimitReached (a new
    queue past DTQ_MAX_QUEUES), or TaskRefused (an enqueue middleware refused it).
    """
    return get_engine().tasks.enqueue(
        type, payload, queue=queue, priority=priority, delay_seconds=delay_seconds, ttl_seconds=ttl_seconds,
        max_attempts=max_attempts, timeout_seconds=timeout_seconds, idempotency_key=idempotency_key,
        group_key=group_key, unique_key=unique_key, unique_mode=unique_mode, unique_window_s=unique_window_s,
        headers=headers, record=False,
    ).id


#: What an enqueue_many item may name: enqueue's arguments, read off its signature.
ENQUEUE_ARGUMENTS = frozenset(inspect.signature(enqueue).parameters)


def enqueue_many(tasks: Iterable[Mapping[str, Any]]) -> list[str]:
    """Queue up many tasks, in order, and return their ids (each as `enqueue` returns it): one
    round trip per 1,000 tasks, one script call per queue partition and 100 tasks (or 1 MB of
    payloads), several times the rate of `enqueue` in a loop (docs/tasks.md, "Submitting many
    tasks").

    Each item maps `enqueue`'s arguments: "type", and any of "payload", "queue", "priority",
    "delay_seconds", "ttl_seconds", "max_attempts", "timeout_seconds", "idempotency_key",
    "group_key", "unique_key", "unique_mode", "unique_window_s", "headers". An item sees the
    earlier ones (an idempotency or unique key repeated in the batch returns the first's id).

    Every item is checked before any is queued: the first bad one raises its error
    (ValidationError, PayloadTooLarge, UnknownTaskType, TaskRefused) with "tasks[i]: " before its
    message, and nothing is queued. A full queue (QueueFull) or the bound on queues
    (QueueLimitReached) refuses items on their own: the others are queued, then the first refusal
    is raised with details["ids"], the batch's ids in order and None where an item was refused.
    Redis trouble raises as for `enqueue` (redis-py's exception), after the items Redis did take
    are queued, with details["ids"] likewise (None where an item may or may not have been queued,
    and for every item after the round of 1,000 that failed, which is not sent); items with an
    idempotency_key can be sent again safely.
    """
    engine = get_engine()
    submissions = []
    for i, item in enumerate(tasks):
        try:
            if not isinstance(item, Mapping):
                raise ValidationError(f"an item must be a mapping of enqueue's arguments, not {type(item).__name__}")
            unknown = sorted(str(k) for k in item if k not in ENQUEUE_ARGUMENTS)
            if unknown:
                raise ValidationError(f"unknown argument {unknown[0]!r} (enqueue takes: "
                                      f"{', '.join(sorted(ENQUEUE_ARGUMENTS))})", field=unknown[0])
            if "type" not in item:
                raise ValidationError("type is required", field="type")
            submissions.append(engine.tasks.validate(**item))
        except DtqError as exc:
            exc.message = f"tasks[{i}]: {exc.message}"
            exc.args = (exc.message,)
            if isinstance(exc, ValidationError) and exc.field:
                exc.field = f"tasks[{i}].{exc.field}"
            raise
    ids: list[str | None] = []
    refused: QueueFull | QueueLimitReached | None = None
    for start in range(0, len(submissions), MANY_PER_ROUND_TRIP):
        failed: Exception | None = None
        for outcome in engine.tasks.enqueue_each(submissions[start:start + MANY_PER_ROUND_TRIP]):
            if isinstance(outcome, Enqueued):
                ids.append(outcome.id)
                continue
            ids.append(None)
            if isinstance(outcome, (QueueFull, QueueLimitReached)):
                refused = refused or outcome
            else:  # Redis failed its call
                failed = failed or outcome
        if failed is not None:  # later rounds are not sent: what landed so far is told, not lost
            ids.extend([None] * (len(submissions) - len(ids)))
            details = getattr(failed, "details", None)
            if isinstance(details, dict):
                details["ids"] = ids
            else:
                failed.details = {"ids": ids}  # type: ignore[attr-defined]  # redis-py's: one attribute of ours
            raise failed
    if refused is not None:
        refused.details["ids"] = ids
        raise refused
    return [i for i in ids if i is not None]
