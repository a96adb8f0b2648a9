"""A Django Tasks backend that runs `@task` functions on dtq workers.

    TASKS = {"default": {"BACKEND": "dtq_core.django_tasks.DtqBackend", "QUEUES": ["default"],
                         "OPTIONS": {"ENQUEUE_ON_COMMIT": True}}}

A Django task becomes a dtq task whose type is the function's import path (e.g.
`myapp.tasks.send_receipt`, so DLQ groups, type filters and metrics tell functions apart) and
whose handler is dtq's Django runner: `django.task` (sync function, run in the worker's thread
pool) or `django.atask` (coroutine function, run on the worker's event loop), kept in the task's
`handler` field. The payload carries the module path, arguments and options. Tasks queued as
type `django.task`/`django.atask` (before per-function types) still run. The mapping of
priorities, statuses and errors is in docs/django-tasks.md.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any

from django.core import checks
from django.db import transaction
from django.utils import timezone

from ..conf import get_config, get_engine
from ..config import ConfigError, DtqConfig
from ..engine import Engine
from ..errors import QueueFull, QueueLimitReached, TaskNotFound, ValidationError
from ..submit import MAX_DELAY_S, Submission
from ..task import TASK_TYPE_RE, valid_queue_name
from . import results
from .checks import check_backend
from .compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    Task,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
)

__all__ = ["DtqBackend", "TaskCancelled", "TaskExpired", "TaskFailed", "enqueue_on_commit"]

TaskCancelled = results.TaskCancelled
TaskExpired = results.TaskExpired
TaskFailed = results.TaskFailed


@dataclass(frozen=True, kw_only=True, slots=True)
class BackendOptions:
    """TASKS[alias]["OPTIONS"], validated; `problems` lists what the system checks report."""

    redis_url: str | None = None  # default: settings.DTQ REDIS_URL (what the workers use)
    high_priority_min: int = 1  # priority >= this runs in dtq's high band
    low_priority_max: int = -1  # priority <= this runs in dtq's low band
    max_attempts: int | None = None  # default: DTQ_MAX_ATTEMPTS (only RetryableError retries)
    timeout_seconds: float | None = None  # default: DTQ_TASK_TIMEOUT_S
    enqueue_on_commit: bool = False  # True: reach Redis only when the surrounding transaction commits
    problems: tuple[tuple[str, str], ...] = ()  # (check id, message)

    @classmethod
    def parse(cls, raw: Any) -> BackendOptions:
        """Read OPTIONS leniently: a bad value keeps its default and is recorded as a problem."""
        if not isinstance(raw, Mapping):
            return cls(problems=(("dtq.E703", "OPTIONS must be a dict"),))
        known = {f.name.upper(): f for f in dataclasses.fields(cls) if f.name != "problems"}
        values: dict[str, Any] = {}
        problems: list[tuple[str, str]] = []
        for key, value in raw.items():
            if key not in known:
                problems.append(("dtq.W701", f"unknown option {key!r} (known: {', '.join(sorted(known))})"))
                continue
            name = known[key].name
            problem = _option_problem(name, value)
            if problem:
                problems.append(("dtq.E701" if name == "redis_url" else "dtq.E703", f"OPTIONS[{key!r}] {problem}"))
            else:
                values[name] = value
        low, high = values.get("low_priority_max", -1), values.get("high_priority_min", 1)
        if not low < high:
            problems.append(("dtq.E703", "OPTIONS LOW_PRIORITY_MAX must be less than HIGH_PRIORITY_MIN"))
            values.pop("low_priority_max", None)
            values.pop("high_priority_min", None)
        return cls(**values, problems=tuple(problems))


def _option_problem(name: str, value: Any) -> str | None:
    def whole(v: Any, lo: int, hi: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi

    if name == "redis_url":
        if not isinstance(value, str):
            return "must be a redis:// URL string"
        try:
            DtqConfig(redis_url=value)
        except ConfigError:
            return f"is not a redis://, rediss:// or unix:// URL (got {value!r})"
        return None
    if name in ("high_priority_min", "low_priority_max"):
        return None if whole(value, -100, 100) else "must be a whole number between -100 and 100"
    if name == "max_attempts":
        return None if value is None or whole(value, 1, 100) else "must be a whole number between 1 and 100"
    if name == "timeout_seconds":
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool) and 0 < value <= 604800)
        return None if ok else "must be a number of seconds between 0 and 604800"
    if name == "enqueue_on_commit":
        return None if isinstance(value, bool) else "must be True or False"
    return None


class DtqBackend(BaseTaskBackend):
    """Enqueue Django tasks onto dtq; read their results back from Redis."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        # Never raise here: a bad OPTIONS dict must reach the system checks, not crash startup.
        self.dtq_options = BackendOptions.parse(self.options)
        self._engine: Engine | None = None
        self._engine_base: DtqConfig | None = None

    # -- configuration -------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The Engine to enqueue on: the process-wide one unless OPTIONS names another Redis."""
        url = self.dtq_options.redis_url
        if url is None:
            return get_engine()
        base = get_config()
        if self._engine is None or self._engine_base is not base:  # rebuilt when settings.DTQ changes
            self._engine = Engine(dataclasses.replace(base, redis_url=url))
            self._engine_base = base
        return self._engine

    def _raise_for_options(self) -> None:
        errors = [message for check_id, message in self.dtq_options.problems if ".E" in check_id]
        if errors:
            raise InvalidTaskBackend(f"TASKS[{self.alias!r}] is misconfigured: {'; '.join(errors)}")

    def validate_task(self, task: Task[Any, Any]) -> None:
        """Apply Django's checks, then dtq's queue-name rule."""
        super().validate_task(task)
        if not valid_queue_name(task.queue_name):
            raise InvalidTask(
                f"queue {task.queue_name!r} is not a dtq queue name ([a-z0-9][a-z0-9_-]{{0,63}}, not dlq or audit)"
            )

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        yield from super().check(**kwargs)
        yield from check_backend(self)

    # -- enqueue --------------------------------------------------------------------------------
    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any]:
        """Queue up the Task on dtq; with ENQUEUE_ON_COMMIT, once the transaction commits."""
        return self._enqueue(task, args, kwargs, on_commit=self.dtq_options.enqueue_on_commit)

    def enqueue_on_commit(self, task: Task[Any, Any], args: Any, kwargs: Any, *, using: str | None = None
                          ) -> TaskResult[Any]:
        """Queue up the Task when the current transaction on `using` commits (at once outside one)."""
        return self._enqueue(task, args, kwargs, on_commit=True, using=using)

    def _enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any, *, on_commit: bool, using: str | None = None
                 ) -> TaskResult[Any]:
        self.validate_task(task)
        self._raise_for_options()
        # The id names the task's partition, and the caller gets it now, before any commit: the
        # partition is chosen here (registering a new queue now, QueueLimitReached included).
        submission, _ = self.engine.tasks.place(self._submission(task, args, kwargs))
        payload = json.loads(submission.payload_json)
        result: TaskResult[Any] = TaskResult(
            task=task, id=submission.task_id, status=TaskResultStatus.READY, enqueued_at=None, started_at=None,
            finished_at=None, last_attempted_at=None, args=payload["args"], kwargs=payload["kwargs"],
            backend=self.alias, errors=[], worker_ids=[],
        )
        if on_commit:
            # Rolled back: the callback is dropped and Redis never hears of the task.
            transaction.on_commit(partial(self._push, submission, result, task.run_after), using=using)
        else:
            self._push(submission, result)
        return result

    def _submission(self, task: Task[Any, Any], args: Any, kwargs: Any) -> Submission:
        try:
            call_args, call_kwargs = normalize_json(list(args)), normalize_json(dict(kwargs))
        except (TypeError, ValueError) as exc:
            raise InvalidTask(f"task arguments must be JSON-serialisable: {exc}") from None
        run_after = task.run_after
        delay = 0.0 if run_after is None else _seconds_until(run_after)
        opts = self.dtq_options
        payload = {
            "module_path": task.module_path, "args": call_args, "kwargs": call_kwargs,
            "takes_context": task.takes_context, "priority": task.priority, "queue_name": task.queue_name,
            "run_after": run_after.isoformat() if isinstance(run_after, datetime) else None, "backend": self.alias,
        }
        kind = results.ASYNC_TYPE if inspect.iscoroutinefunction(task.func) else results.SYNC_TYPE
        # The function's path as the type; a path dtq cannot use as one (over 200 characters,
        # non-ASCII identifiers) falls back to the runner's generic type.
        ttype = task.module_path if TASK_TYPE_RE.fullmatch(task.module_path) else kind
        try:
            return self.engine.tasks.validate(
                ttype, payload, handler=kind, queue=task.queue_name,
                priority=results.dtq_priority(task.priority, high_min=opts.high_priority_min,
                                              low_max=opts.low_priority_max),
                delay_seconds=delay, max_attempts=opts.max_attempts, timeout_seconds=opts.timeout_seconds,
            )
        except ValidationError as exc:  # also PayloadTooLarge
            if exc.field == "delay_seconds":  # a name the Django author never wrote: say run_after
                raise InvalidTask(f"run_after must be at most {MAX_DELAY_S // 86400} days ahead") from exc
            raise InvalidTask(exc.message) from exc

    def _push(self, submission: Submission, result: TaskResult[Any], run_after: datetime | None = None) -> None:
        if run_after is not None:
            # run_after is a time, not a delay: counted again at the commit, however long the
            # transaction stayed open (a commit after it queues the task at once).
            submission = dataclasses.replace(submission, delay_s=_seconds_until(run_after))
        (reply,) = self.engine.tasks.enqueue_many([submission])
        if isinstance(reply, (QueueFull, QueueLimitReached)):
            raise reply
        if reply.id != result.id:  # the queue was deleted before the commit: placed anew
            object.__setattr__(result, "id", reply.id)
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(sender=type(self), task_result=result)

    # -- results --------------------------------------------------------------------------------
    def get_result(self, result_id: str) -> TaskResult[Any]:
        """Rebuild the TaskResult from Redis; raise TaskResultDoesNotExist for unknown ids."""
        try:
            fields, stored = self.engine.tasks.record(result_id) if isinstance(result_id, str) else ({}, None)
        except TaskNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        # A plain dtq task (dtq_tasks.enqueue, the API) is not a Django task result.
        if not fields or not results.is_django_task(fields):
            raise TaskResultDoesNotExist(result_id)
        return results.to_result(fields, stored, alias=self.alias, task_id=result_id)


def _seconds_until(when: datetime) -> float:
    """Seconds from now until `when` (0 when past); naive times are in the current time zone."""
    now = timezone.now()
    if timezone.is_naive(when) and timezone.is_aware(now):
        when = timezone.make_aware(when)
    elif timezone.is_aware(when) and timezone.is_naive(now):  # USE_TZ = False
        now = timezone.make_aware(now)
    return max(0.0, (when - now).total_seconds())


def enqueue_on_commit(task: Task[Any, Any], *args: Any, **kwargs: Any) -> TaskResult[Any]:
    """Queue up `task(*args, **kwargs)` when the default database's transaction commits.

    Returns the READY TaskResult at once; its id is only known to Redis after the commit.
    """
    backend = task.get_backend()
    if not isinstance(backend, DtqBackend):
        raise InvalidTask(f"enqueue_on_commit needs a DtqBackend; task backend {task.backend!r} is "
                          f"{type(backend).__name__}")
    return backend.enqueue_on_commit(task, args, kwargs)
