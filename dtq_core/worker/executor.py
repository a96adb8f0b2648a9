"""Run one attempt of a handler and classify how it ended, as a record for the completion script.

Classification (contract section 5): RetryableError, handler timeouts and Redis connection
errors (redis-py's ConnectionError and TimeoutError) retry with backoff until max_attempts;
unknown task types, payload decode errors and every other exception are permanent, builtin
OSErrors such as FileNotFoundError or a TimeoutError from the handler's own code included.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import sys
import threading
import time
import traceback
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import FrameType, MappingProxyType
from typing import TYPE_CHECKING, Any

from .. import hooks, registry
from ..clock import Clock
from ..codec import encode_result, truncate_result, valid_utf8
from ..config import DtqConfig
from ..connection import REDIS_CONNECTION_ERRORS, write_refused
from ..encryption import DecryptionFailed, configure, encrypts, is_sealed, seal, token_shaped, unseal, unseal_inputs
from ..integrations import otel, sentry
from ..keys import tag_of
from ..middleware import execution_chain, wrap_async, wrap_sync
from ..task import Outcome, RetryPolicy, next_attempt_at

if TYPE_CHECKING:
    from .progress import ProgressReporter
    from .threads import HandlerThreads

logger = logging.getLogger("dtq.worker")

BUCKETS: tuple[float, ...] = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
TRACEBACK_TAIL = 2000


@dataclass(slots=True)
class Row:
    """A claimed task, as the fetch/claim scripts return it."""

    entry_id: str
    stream: str
    task_id: str
    attempt: int
    max_attempts: int
    type: str
    payload: str
    timeout_s: float
    queue: str
    priority: str
    handler: str = ""  # the registered handler that runs it, when not the type's own (Django tasks)
    # When the claim reached this worker (the worker's clock.monotonic(), given by WorkerStore).
    received_at: float = field(default_factory=time.monotonic)
    tag: str = ""  # its partition's tag, when the caller knows it (else read from the task id)
    # A workflow's step: "<workflow id>|<step>|<parent result JSON>" from the claim ("" otherwise).
    workflow: str = ""
    headers: str = ""  # its headers as stored (JSON), "" when it has none

    @classmethod
    def from_reply(cls, r: list[Any], received_at: float, tag: str) -> Row:
        return cls(entry_id=r[1], stream=r[2], task_id=r[3], attempt=int(r[4]), max_attempts=int(r[5]),
                   type=r[6], payload=r[7], timeout_s=float(r[8] or 300), queue=r[9], priority=r[10],
                   handler=r[11] if len(r) > 11 else "", received_at=received_at, tag=tag,
                   headers=r[12] if len(r) > 12 else "", workflow=r[13] if len(r) > 13 else "")

    @property
    def workflow_id(self) -> str:
        return self.workflow.split("|", 1)[0]

    @property
    def partition_tag(self) -> str:
        """The tag of the partition the task lives in: its scripts are routed by it."""
        return self.tag or tag_of(self.task_id)


@dataclass(slots=True)
class Completion:
    row: Row
    outcome: Outcome
    result_json: str = ""
    truncated: bool = False
    error_class: str = ""
    error_message: str = ""
    traceback: str = ""
    retry_due_ms: int = 0
    duration_s: float = 0.0
    limit_scope: str = ""  # a LIMITED outcome's pause: queue or group

    def record(self) -> list[str]:
        """The completeTasks record: 13 strings (the script compares attempt as a string), 14 for a
        limited one (its scope)."""
        r = self.row
        record = [r.task_id, str(r.attempt), r.entry_id, r.stream, self.outcome.value, self.result_json,
                  "1" if self.truncated else "0", self.error_class, self.error_message[:2000], self.traceback,
                  str(self.retry_due_ms), f"{self.duration_s:.6f}", bucket_label(self.duration_s)]
        if self.limit_scope:
            record.append(self.limit_scope)
        return record


def bucket_label(seconds: float) -> str:
    for bound in BUCKETS:
        if seconds <= bound:
            return f"le_{bound:g}"
    return "le_inf"


class UnknownTaskType(Exception):
    pass


class PayloadDecodeError(Exception):
    pass


class HandlerTimeout(Exception):
    pass


@dataclass(slots=True)
class Execution:
    """One in-flight attempt; the cancel watcher and drain act on it through these flags."""

    row: Row
    task: asyncio.Task[Any] | None = None  # an async handler's (or a stale claim's re-check)
    cancel_requested: bool = False
    abandoned: bool = False  # drain deadline: leave the entry unacked for a peer
    deadline: float = float("inf")  # clock.monotonic() past which the worker's watchdog cancels it
    timed_out: bool = False
    in_thread: bool = False  # a sync handler, run by a handler thread
    threads: HandlerThreads | None = None  # those threads, once handed over
    settled: bool = False  # its outcome is recorded (by its thread, or by the loop giving up on it)
    started: float = 0.0  # perf_counter() when handed over
    timer: asyncio.TimerHandle | None = None  # a short timeout's own timer
    handler: Any = None  # its registry.Registered, when a thread runs it
    thread_id: int = 0  # its thread, while it runs
    thread_frame: Any = None  # its _in_thread frame there, while it runs
    thread_stack: str = ""  # that thread's stack when the timeout fired: where it was stuck


PERMANENT = (UnknownTaskType, PayloadDecodeError, DecryptionFailed)  # never retried, whatever they derive from
TIMEOUT_CHECK_S = 0.05  # the worker's deadline check: how late a handler timeout may fire
EXACT_TIMEOUT_BELOW_S = 1.0  # shorter handler timeouts get a timer of their own


def expire(ex: Execution) -> bool:
    """Cancel an attempt for its handler timeout, once; False when it already ended or expired."""
    if ex.timed_out:
        return False
    threads = ex.threads
    if threads is not None:  # the thread runs on, detached: record where it is now, for the error
        stack = _thread_stack(ex)
        timeout = HandlerTimeout(f"handler exceeded its timeout of {ex.row.timeout_s:g}s")
        completion = threads.runner._failed(ex.row, timeout, time.perf_counter() - ex.started, frames=stack)
        ex.timed_out = threads.give_up(ex, completion)
        return ex.timed_out
    if ex.task is None or ex.task.done():
        return False
    ex.timed_out = True
    ex.task.cancel()
    return True


def cancel(ex: Execution) -> bool:
    """End an attempt on a cancel request: CANCELLED (a sync handler's thread runs on, detached)."""
    if ex.threads is not None:
        completion = Completion(ex.row, Outcome.CANCELLED, duration_s=time.perf_counter() - ex.started)
        ex.cancel_requested = ex.threads.give_up(ex, completion)
        return ex.cancel_requested
    if ex.task is None or ex.task.done():
        return False
    ex.cancel_requested = True
    ex.task.cancel()
    return True


def abandon(ex: Execution) -> None:
    """Drain deadline: end the attempt with no outcome, its entry left unacked for a peer."""
    ex.abandoned = True
    if ex.threads is not None:
        ex.threads.give_up(ex, None)
    elif ex.task is not None:
        ex.task.cancel()


def _thread_stack(ex: Execution) -> str:
    """The stack of a sync handler's thread, from its _in_thread call down to where it is now."""
    top = ex.thread_frame
    frame = sys._current_frames().get(ex.thread_id) if top is not None else None
    frames = []
    while frame is not None:  # not finding `top` means the thread has moved on to another attempt
        frames.append(frame)
        if frame is top:
            summary = traceback.StackSummary.extract((f, f.f_lineno) for f in reversed(frames))
            return "".join(summary.format())
        frame = frame.f_back
    return "  (no stack: the handler's thread had not started it yet, or had just returned)\n"


def expire_overdue(executions: Iterable[Execution], now: float) -> int:
    """Cancel the attempts past their handler timeout; return how many.

    One periodic check for every attempt costs less than a timer per attempt (the hot path),
    at the price of a timeout firing up to one check interval late; timeouts under
    EXACT_TIMEOUT_BELOW_S, where that would matter, also get a timer (AttemptRunner.run).
    """
    return sum(1 for ex in executions if now >= ex.deadline and expire(ex))


class AttemptRunner:
    """Runs attempts: async handlers on the loop (run), sync ones in a handler thread
    (run_in_thread, called by threads.HandlerThreads)."""

    def __init__(self, config: DtqConfig, clock: Clock, worker_id: str) -> None:
        self.config = config
        self.clock = clock
        self.worker_id = worker_id
        self.policy = RetryPolicy(base_s=config.retry_base_s, max_s=config.retry_max_s)
        self.progress: ProgressReporter | None = None  # where ctx.progress() reports (set by the Worker)
        self.middleware = execution_chain(config.execution_middleware)  # DTQ_EXECUTION_MIDDLEWARE
        configure(config.encryption_keys)  # what this process shows decrypted

    def run_in_thread(self, ex: Execution) -> Completion | None:
        """Run one attempt of a sync handler in this (handler) thread; None when it raised
        KeyboardInterrupt or SystemExit (its entry is left to redelivery)."""
        row = ex.row
        started = time.perf_counter()
        try:
            payload = self._payload(row)
            # A fresh context per attempt, as an asyncio Task gets: what a handler sets in its
            # context variables does not leak into the next attempt this thread runs.
            result = contextvars.Context().run(self._call_in_thread, row, ex, payload)
        except BaseException as exc:  # noqa: BLE001 - the handler is user code; every outcome is recorded
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                logger.error("task_id=%s worker_id=%s handler raised %s: attempt left to redelivery", row.task_id,
                             self.worker_id, type(exc).__name__)
                return None
            return self._failed(row, exc, time.perf_counter() - started)
        return self._succeeded(row, result, time.perf_counter() - started)

    def _call_in_thread(self, row: Row, ex: Execution, payload: Any) -> Any:
        ctx = self._context(row)
        registry.set_current(ctx)
        fn = ex.handler.fn
        if self.middleware:
            fn = wrap_sync(self.middleware, ctx, fn)
        if self.config.opentelemetry != "off" and otel.enabled(self.config):  # a CONSUMER span per attempt
            fn = otel.wrap_sync(ctx, fn, retryable)
        if hooks.SIGNALS is not None:
            _started(ctx)
        return _in_thread(ex, fn, payload)

    def _payload(self, row: Row) -> Any:
        """The payload the handler gets: decoded, and decrypted when its type is encrypted."""
        try:
            payload = json.loads(row.payload) if row.payload else {}
        except ValueError as exc:
            raise PayloadDecodeError(f"payload is not valid JSON: {exc}") from None
        if type(payload) is str and is_sealed(payload):
            # By type, not by prefix: a token read out of Redis and submitted as a plain type's
            # payload would otherwise be decrypted for whoever submitted it (encryption.py). Nor is
            # the token handed over as a string: a worker whose DTQ_ENCRYPT_TYPES lacks the type
            # would run the handler on it; the attempt fails, saying why.
            if encrypts(self.config.encrypt_types, row.type):
                payload = unseal(self.config.encryption_keys, payload)  # DecryptionFailed: permanent
            elif token_shaped(payload):
                raise DecryptionFailed(
                    f"the payload is an encrypted token, but this worker does not encrypt type {row.type!r}: "
                    "list it in DTQ_ENCRYPT_TYPES on every worker and submitter (or the token was "
                    "submitted again from a copy of Redis as a plain type's payload)")
        return payload

    def _context(self, row: Row) -> registry.TaskContext:
        if row.workflow:
            wid, step, parent = row.workflow.split("|", 2)
            return registry.TaskContext(task_id=row.task_id, attempt=row.attempt, max_attempts=row.max_attempts,
                                        queue=row.queue, type=row.type, worker_id=self.worker_id,
                                        entry_id=row.entry_id, workflow_id=wid,
                                        workflow_step=int(step) if step.isdigit() else -1,
                                        parent_result=_parent(self._input_keys(row.type), parent),
                                        reporter=self.progress,
                                        headers=_headers(row.headers))
        return registry.TaskContext(task_id=row.task_id, attempt=row.attempt, max_attempts=row.max_attempts,
                                    queue=row.queue, type=row.type, worker_id=self.worker_id,
                                    entry_id=row.entry_id, reporter=self.progress, headers=_headers(row.headers))

    def _input_keys(self, task_type: str) -> tuple[str, ...]:
        """The keys a workflow step's input is decrypted with: none for a plain type, whose inputs
        may hold a token a plain step before it was given and returned."""
        return self.config.encryption_keys if encrypts(self.config.encrypt_types, task_type) else ()

    async def run(self, ex: Execution) -> Completion | None:
        """Run one attempt; None when it was abandoned at the drain deadline."""
        row = ex.row
        started = time.perf_counter()
        ex.deadline = self.clock.monotonic() + row.timeout_s
        timer = None
        if row.timeout_s < EXACT_TIMEOUT_BELOW_S:
            timer = asyncio.get_running_loop().call_later(row.timeout_s, expire, ex)
        try:
            result = await self._call(row, ex)
        except asyncio.CancelledError as cancelled:
            if ex.abandoned:
                return None
            if ex.cancel_requested:
                return Completion(row, Outcome.CANCELLED, duration_s=time.perf_counter() - started)
            if ex.timed_out:
                timeout = HandlerTimeout(f"handler exceeded its timeout of {row.timeout_s:g}s")
                return self._failed(row, timeout, time.perf_counter() - started,
                                    frames=ex.thread_stack or "".join(traceback.format_tb(cancelled.__traceback__)))
            raise
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            return self._failed(row, exc, time.perf_counter() - started)
        finally:
            if timer is not None:
                timer.cancel()
        return self._succeeded(row, result, time.perf_counter() - started)

    async def _call(self, row: Row, ex: Execution) -> Any:
        handler = registry.get(row.handler or row.type)
        if handler is None:
            named = f"handler {row.handler!r} of task type {row.type!r}" if row.handler else f"task type {row.type!r}"
            raise UnknownTaskType(f"no handler registered for {named}")
        payload = self._payload(row)
        if not handler.is_async:  # only when a test calls run() for a sync handler: no thread
            raise TypeError(f"{row.type}: sync handlers run in handler threads (run_in_thread)")
        ctx = self._context(row)
        registry.set_current(ctx)  # this Task has its own context copy
        if hooks.SIGNALS is not None:
            _started(ctx)
        fn = handler.fn
        if self.middleware:
            fn = wrap_async(self.middleware, ctx, fn)
        if self.config.opentelemetry != "off" and otel.enabled(self.config):
            fn = otel.wrap_async(ctx, fn, retryable)
        return await fn(payload)

    def _succeeded(self, row: Row, result: Any, duration: float) -> Completion:
        encoded, truncated = truncate_result(encode_result(result), self.config.result_max_bytes)
        if self.config.encrypt_types and encoded != "null" and encrypts(self.config.encrypt_types, row.type):
            encoded = seal(self.config.encryption_keys, encoded)  # (None says nothing: kept as the flag)
        if hooks.SIGNALS is not None:
            hooks.send("task_succeeded", task_id=row.task_id, type=row.type, queue=row.queue, attempt=row.attempt,
                       result=result, duration_s=duration)
        return Completion(row, Outcome.SUCCEEDED, result_json=encoded, truncated=truncated, duration_s=duration)

    def _failed(self, row: Row, exc: BaseException, duration: float, *, frames: str = "") -> Completion:
        """frames: for a timeout (never raised where the handler was), the stack it was cut off in."""
        completion = self._classified(row, exc, duration, frames)
        if completion.outcome in (Outcome.RETRY, Outcome.FAILED) and self.config.sentry != "off":
            sentry.report(self.config, task_id=row.task_id, type=row.type, queue=row.queue, attempt=row.attempt,
                          max_attempts=row.max_attempts, payload=row.payload, exc=exc,
                          ends_task=completion.outcome is Outcome.FAILED or not completion.retry_due_ms)
        if hooks.SIGNALS is not None and completion.outcome in (Outcome.RETRY, Outcome.FAILED):
            hooks.send("task_failed", task_id=row.task_id, type=row.type, queue=row.queue, attempt=row.attempt,
                       exception=exc, will_retry=completion.outcome is Outcome.RETRY and completion.retry_due_ms > 0)
        return completion

    def _classified(self, row: Row, exc: BaseException, duration: float, frames: str) -> Completion:
        # Redis refusing writes (disk full, maxmemory) is an outage, not the task's fault: retry it.
        is_retryable = retryable(exc)
        error_class = error_name(exc)
        if frames:
            text = f"Traceback (most recent call last):\n{frames}{''.join(traceback.format_exception_only(exc))}"
        else:
            text = "".join(traceback.format_exception(exc))
        tb = valid_utf8(text[-TRACEBACK_TAIL:])
        message = valid_utf8(_message(exc)) or error_class
        if isinstance(exc, registry.RateLimited):
            # Not a failure: the task waits (not an attempt) and its queue or group pauses.
            until = self.clock.now_ms() + int((exc.retry_after or 0) * 1000)
            return Completion(row, Outcome.LIMITED, error_class=error_class, error_message=message,
                              retry_due_ms=until, duration_s=duration, limit_scope=exc.scope)
        if is_retryable:
            due = next_attempt_at(attempt=row.attempt, max_attempts=row.max_attempts,
                                  now_ms=self.clock.now_ms(), policy=self.policy)
            retry_after = getattr(exc, "retry_after", None) if isinstance(exc, registry.RetryableError) else None
            if due is not None and retry_after is not None:
                due = self.clock.now_ms() + int(retry_after * 1000)
            return Completion(row, Outcome.RETRY, error_class=error_class, error_message=message,
                              traceback=tb, retry_due_ms=due or 0, duration_s=duration)
        return Completion(row, Outcome.FAILED, error_class=error_class, error_message=message,
                          traceback=tb, duration_s=duration)


def retryable(exc: BaseException) -> bool:
    """Whether an attempt that raised exc is retried (while attempts are left)."""
    return (isinstance(exc, (registry.RetryableError, HandlerTimeout, *REDIS_CONNECTION_ERRORS))
            or write_refused(exc)) and not isinstance(exc, PERMANENT)


def _message(exc: BaseException) -> str:
    # A handler's exception is user code: a __str__ that raises must not leave the task RUNNING.
    try:
        return str(exc)
    except Exception:  # noqa: BLE001 - anything its __str__ raises
        return f"<{type(exc).__name__}: str() failed>"


def _in_thread(ex: Execution, fn: Any, payload: Any) -> Any:
    """A sync handler's call in its pool thread, which a timeout can then find (expire)."""
    ex.thread_id, ex.thread_frame = threading.get_ident(), sys._getframe()
    try:
        return fn(payload)
    finally:
        ex.thread_id, ex.thread_frame = 0, None


_IN_THREAD = _in_thread.__code__


def given_up() -> bool:
    """In a sync handler's thread: whether the worker has given up on the attempt it runs (its
    handler timeout, a cancel, the drain deadline) and recorded the attempt's end itself, so that
    what the handler does from now on is dropped. False outside a handler thread.

    The attempt is found on this thread's stack, in _in_thread's frame, rather than handed to every
    handler: attempts pay nothing for it unless their handler asks (the Django runner, before it
    sends task_finished). `settled` is that flag while the handler runs: give_up sets it under the
    threads' lock; the thread itself sets it only once the handler has returned.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code is _IN_THREAD:
            ex = frame.f_locals.get("ex")
            return isinstance(ex, Execution) and ex.settled
        frame = frame.f_back
    return False


def error_name(exc: BaseException) -> str:
    cls = type(exc)
    if cls in (UnknownTaskType, PayloadDecodeError, HandlerTimeout, DecryptionFailed):
        return f"dtq.{cls.__name__}"
    if cls is registry.RetryableError:
        return "dtq_tasks.RetryableError"
    if cls is registry.RateLimited:
        return "dtq_tasks.RateLimited"
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"


_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


def _headers(raw: str) -> Mapping[str, str]:
    """A task's headers for its context: read-only, the shared empty mapping for the usual none."""
    if not raw:
        return _NO_HEADERS
    try:
        value = json.loads(raw)
    except ValueError:
        return _NO_HEADERS
    return MappingProxyType(value) if isinstance(value, dict) else _NO_HEADERS


def _started(ctx: registry.TaskContext) -> None:
    hooks.send("task_started", task_id=ctx.task_id, type=ctx.type, queue=ctx.queue, attempt=ctx.attempt, context=ctx)


def _parent(keys: tuple[str, ...], raw: str) -> Any:
    """A workflow step's input, as its claim carries it (JSON, its encrypted results decrypted);
    the text itself if it is not JSON."""
    try:
        value = json.loads(raw)
    except ValueError:
        return raw
    return unseal_inputs(keys, value) if keys else value
