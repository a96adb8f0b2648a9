"""The worker in-process (real Redis, real asyncio loop): outcomes, retries, the DLQ, timeouts,
expiry, results, priorities, pauses, duplicate absorption and handler context."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import json
import logging
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
import redis

import dtq_tasks
from dtq_core import registry
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.keys import Keys
from dtq_core.scripts import LIBRARIES, Scripts
from dtq_core.worker import Worker
from dtq_core.worker.executor import Row

from ..conftest import wait_for
from .support import AfterCall, tag

RECORDED: list[Any] = []


@pytest.fixture(autouse=True)
def test_handlers() -> Iterator[None]:
    RECORDED.clear()

    async def record(payload: Any) -> Any:
        RECORDED.append(payload)
        return payload

    def where(payload: Any) -> dict[str, Any]:
        ctx = dtq_tasks.current_task()
        assert ctx is not None
        return {"thread": threading.current_thread().name, "task_id": ctx.task_id, "attempt": ctx.attempt,
                "queue": ctx.queue}

    async def big(payload: Any) -> str:
        return "y" * payload["n"]

    registry.register("test.record", record)
    registry.register("test.where", where)
    async def undecodable(payload: Any) -> Any:
        text = b"caf\xe9".decode(errors="surrogateescape")  # a lone surrogate: not UTF-8
        if payload.get("fail"):
            raise ValueError(f"bad {text}")
        return text

    registry.register("test.big", big)
    registry.register("test.undecodable", undecodable)
    yield


def make_engine(config: DtqConfig, **overrides: Any) -> tuple[Engine, DtqConfig]:
    cfg = DtqConfig.from_mapping({**config.as_settings(), **{k.upper(): v for k, v in overrides.items()}})
    return Engine(cfg), cfg


def run_burst(config: DtqConfig, *, timeout: float = 30, **kwargs: Any) -> Worker:
    worker = Worker(config, burst=True, name=f"burst-{time.monotonic_ns()}", **kwargs)
    asyncio.run(asyncio.wait_for(worker.run(), timeout))
    return worker


@contextlib.asynccontextmanager
async def running_worker(config: DtqConfig, **kwargs: Any) -> AsyncIterator[Worker]:
    """A (non-burst) worker on this event loop, running for the block; stopped and drained after."""
    worker = Worker(config, name=f"inproc-{time.monotonic_ns()}", **kwargs)
    run = asyncio.create_task(worker.run())
    try:
        while worker.state != "running":
            await asyncio.sleep(0.01)
        yield worker
    finally:
        worker.request_stop()
        await asyncio.wait_for(run, 15)


async def status_once(engine: Engine, task_id: str, done: Callable[[str], bool], timeout: float = 10) -> str:
    """Poll the task's status until done(status) or the deadline; return the last one seen."""
    deadline = time.monotonic() + timeout
    while not done(status := str(engine.tasks.get(task_id)["status"])) and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    return status


def stale_row(engine: Engine, task_id: str, queue: str) -> Row:
    """The row of a claim that reached its worker a minute ago (the worker stalled since)."""
    entry_id = engine.client.hget(engine.keys.task(task_id), "entry_id")
    return Row(entry_id=entry_id, stream=engine.keys.stream(tag(engine, queue), queue, "normal"), task_id=task_id,
               attempt=1,
               max_attempts=1, type="test.record", payload=json.dumps(engine.tasks.get(task_id)["payload"]),
               timeout_s=5, queue=queue, priority="normal", received_at=time.monotonic() - 60)


def test_it_runs_a_task_and_stores_its_result(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("dtq.echo", {"hello": "world"}).id
    worker = run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "SUCCEEDED" and task["result"] == {"hello": "world"}
    assert task["attempt"] == 1 and task["worker_id"] == worker.worker_id and task["compact"]
    assert task["started_at"] and task["finished_at"] and not task["result_truncated"]
    t = tag(engine, "default")
    stream = engine.keys.stream(t, "default", "normal")
    assert redis_client.xlen(stream) == 0 and redis_client.xpending(stream, Keys.GROUP)["pending"] == 0
    assert redis_client.hget(engine.keys.stats_tasks(t), "default|dtq.echo|succeeded") == "1"
    assert redis_client.zscore(engine.keys.workers(), worker.worker_id) is None  # deregistered on exit


@pytest.mark.parametrize("kind", ["async", "sync"])
def test_max_tasks_runs_that_many_attempts_and_leaves_the_rest_queued(config: DtqConfig, kind: str) -> None:
    # --max-tasks 3 on a worker with 10 free slots and 10 tasks waiting: it runs 3 and exits; the
    # other 7 are still QUEUED for the next worker (not claimed, run, or left to a reclaim).
    def sync_record(payload: Any) -> Any:
        RECORDED.append(payload)
        return payload

    registry.register("test.sync_record", sync_record)
    engine, cfg = make_engine(config)
    ttype = "test.record" if kind == "async" else "test.sync_record"
    ids = [engine.tasks.enqueue(ttype, {"i": i}).id for i in range(10)]
    run_burst(cfg, concurrency=10, max_tasks=3)
    statuses = [engine.tasks.get(task_id)["status"] for task_id in ids]
    assert statuses.count("SUCCEEDED") == 3 and statuses.count("QUEUED") == 7, statuses
    assert len(RECORDED) == 3
    run_burst(cfg, concurrency=10)  # the rest, for another worker, at once
    assert {engine.tasks.get(task_id)["status"] for task_id in ids} == {"SUCCEEDED"}


def test_a_retryable_error_retries_with_backoff_then_succeeds(config: DtqConfig) -> None:
    engine, cfg = make_engine(config, retry_base_s=0.01, retry_max_s=0.05)
    task_id = engine.tasks.enqueue("dtq.flaky", {"fail_times": 2}, max_attempts=3).id
    run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "SUCCEEDED" and task["result"] == {"attempt": 3} and task["attempt"] == 3
    assert [e["attempt"] for e in task["errors"]] == [1, 2]
    assert {e["error"] for e in task["errors"]} == {"dtq_tasks.RetryableError"}
    assert all(e["traceback"] for e in task["errors"])


def test_retries_exhausted_go_to_the_dlq(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, retry_base_s=0.01, retry_max_s=0.02)
    task_id = engine.tasks.enqueue("dtq.fail", {"retryable": True, "message": "try later"}, max_attempts=2).id
    run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED" and task["attempt"] == 2 and len(task["errors"]) == 2
    (entry,) = engine.dlq.list().items
    assert entry["task_id"] == task_id and entry["error"] == "try later" and entry["attempt"] == 2
    assert engine.queues.stats(["default"])[0]["dlq"] == 1


@pytest.mark.parametrize(
    ("type_", "payload", "error"),
    [("dtq.fail", {"message": "bad input"}, "RuntimeError"),
     ("no.such.type", {}, "dtq.UnknownTaskType"),
     ("dtq.sleep", {"seconds": "x"}, "ValueError")],
)
def test_permanent_failures_take_one_attempt(config: DtqConfig, type_: str, payload: Any, error: str) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue(type_, payload, max_attempts=5).id
    run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED" and task["attempt"] == 1
    assert task["errors"][0]["error"] == error


_RAISED: dict[str, BaseException] = {
    "FileNotFoundError": FileNotFoundError(2, "No such file or directory", "/nope"),
    "PermissionError": PermissionError(13, "Permission denied", "/root/x"),
    "ConnectionRefusedError": ConnectionRefusedError(111, "Connection refused (another service)"),
    "TimeoutError": TimeoutError("the handler's own socket timed out"),
    "OSError": OSError(28, "No space left on device"),
    "redis.exceptions.ConnectionError": redis.exceptions.ConnectionError("Error 111 connecting to redis"),
    "redis.exceptions.TimeoutError": redis.exceptions.TimeoutError("Timeout reading from redis"),
    "redis.exceptions.BusyLoadingError": redis.exceptions.BusyLoadingError("Redis is loading the dataset"),
    "dtq_tasks.RetryableError": dtq_tasks.RetryableError("later"),
}


@pytest.mark.parametrize(("error", "attempts"), [
    ("FileNotFoundError", 1), ("PermissionError", 1), ("ConnectionRefusedError", 1), ("TimeoutError", 1),
    ("OSError", 1), ("redis.exceptions.ConnectionError", 3), ("redis.exceptions.TimeoutError", 3),
    ("redis.exceptions.BusyLoadingError", 3), ("dtq_tasks.RetryableError", 3),
])
def test_only_redis_connection_errors_retry_among_os_errors(config: DtqConfig, error: str, attempts: int) -> None:
    # It should: a handler's own OSError (a missing file, a refused connection to another service)
    # is permanent like any exception; only redis-py's connection errors (and RetryableError) retry.
    def raises(payload: Any) -> None:
        raise _RAISED[error]

    registry.register(f"test.raises.{error}", raises)
    engine, cfg = make_engine(config, retry_base_s=0.01, retry_max_s=0.02)
    task_id = engine.tasks.enqueue(f"test.raises.{error}", max_attempts=3).id
    run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED" and task["attempt"] == attempts
    assert [e["error"] for e in task["errors"]] == [error] * attempts


def test_a_payload_that_does_not_decode_is_poison(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("dtq.echo").id
    redis_client.hset(engine.keys.task(task_id), "payload", "{not json")
    run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED" and task["errors"][0]["error"] == "dtq.PayloadDecodeError"


@pytest.mark.parametrize("delayed", [False, True], ids=["fetched", "scheduled"])
def test_a_corrupt_record_is_quarantined_alone_when_fetched_or_scheduled(
        config: DtqConfig, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture, delayed: bool) -> None:
    # It should: one task whose attempt field was overwritten by hand cannot stop the fetch (or
    # the scheduler's batch) for the others: it is dead-lettered as dtq.CorruptRecord, alone.
    engine, cfg = make_engine(config, scheduler_interval_s=0.05)
    delay = 0.2 if delayed else 0
    ids = [engine.tasks.enqueue("dtq.echo", {"n": n}, delay_seconds=delay).id for n in range(3)]
    redis_client.hset(engine.keys.task(ids[1]), "attempt", "one")
    run_burst(cfg)
    assert [engine.tasks.get(t)["status"] for t in ids] == ["SUCCEEDED", "DEAD_LETTERED", "SUCCEEDED"]
    bad = engine.tasks.get(ids[1])
    assert bad["last_error"].startswith("dtq.CorruptRecord: ") and bad["errors"][-1]["error"] == "dtq.CorruptRecord"
    assert redis_client.hget(engine.keys.task(ids[1]), "attempt_corrupt") == "one"  # kept for the operator
    (entry,) = engine.dlq.list().items
    assert entry["task_id"] == ids[1] and entry["error_class"] == "dtq.CorruptRecord"
    assert redis_client.hget(engine.keys.stats_counters(tag(engine, "default")), "corrupt_records") == "1"
    [logged] = [r for r in caplog.records if "quarantined as dtq.CorruptRecord" in r.getMessage()]
    assert logged.levelname == "ERROR" and f"task_id={ids[1]}" in logged.getMessage()
    assert ("scheduler could not queue it" if delayed else "could not be claimed") in logged.getMessage()
    # A retry from the DLQ starts the attempt count afresh: it runs.
    assert engine.dlq.retry(DlqSelection(task_ids=(ids[1],)), Actor.cli()) == 1
    run_burst(cfg)
    assert engine.tasks.get(ids[1])["status"] == "SUCCEEDED"


def test_a_dead_letter_whose_task_cannot_be_read_stays_while_the_rest_are_retried(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    ids = [engine.tasks.enqueue("dtq.fail", {"message": f"boom {n}"}).id for n in range(3)]
    run_burst(cfg)
    redis_client.delete(engine.keys.task(ids[1]))
    redis_client.set(engine.keys.task(ids[1]), "overwritten by hand")  # not a hash any more
    assert engine.dlq.retry(DlqSelection(all=True), Actor.cli()) == 2
    assert [e["task_id"] for e in engine.dlq.list().items] == [ids[1]]
    assert engine.dlq.discard(DlqSelection(all=True), Actor.cli()) == 1
    assert engine.dlq.list().items == []


class LosesOneReply:
    """A TCP proxy in front of Redis that, once, passes a command on and loses Redis's reply to it
    (the connection drops after the command ran): a reply lost in the network."""

    def __init__(self, redis_url: str, needle: bytes) -> None:
        self.target = redis.connection.parse_url(redis_url)
        self.needle = needle
        self.lost = 0
        self.url = ""

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/{self.target.get('db', 0)}"

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(self.target["host"], self.target["port"])
        drop_next_reply = False

        async def upstream() -> None:
            nonlocal drop_next_reply
            while data := await client_r.read(65536):
                if not self.lost and not drop_next_reply and self.needle in data:
                    drop_next_reply = True
                server_w.write(data)
                await server_w.drain()

        async def downstream() -> None:
            while data := await server_r.read(65536):
                if drop_next_reply:  # Redis ran it and answered: the answer never arrives
                    self.lost += 1
                    return
                client_w.write(data)
                await client_w.drain()

        tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in tasks:
            task.cancel()
        client_w.close()
        server_w.close()


@pytest.mark.single_node
def test_a_completion_resent_after_a_lost_reply_is_recognised_not_fenced(
        config: DtqConfig, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    # It should: the worker's completion batch lands but its reply is lost; the worker sends the
    # batch again. That second send is told apart from a fenced completion (a newer attempt's):
    # nothing is counted as fenced or logged as discarded, and nothing is written twice.
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("dtq.fail", {"message": "bad input"}).id
    library = LIBRARIES["completeTasks"]  # the completion is an FCALL of its function
    redis_client.function_load(library.source, replace=True)  # so the first send runs it
    proxy = LosesOneReply(cfg.redis_url, library.function.encode())

    async def scenario() -> None:
        await proxy.start()
        worker = Worker(dataclasses.replace(cfg, redis_url=proxy.url), burst=True, name="resender")
        await asyncio.wait_for(worker.run(), 30)
        proxy.server.close()

    with caplog.at_level(logging.INFO, logger="dtq.worker"):
        asyncio.run(scenario())
    assert proxy.lost == 1
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED" and task["attempt"] == 1 and len(task["errors"]) == 1
    assert [e["task_id"] for e in engine.dlq.list().items] == [task_id]  # one dead letter, not two
    t = tag(engine, "default")
    assert redis_client.hget(engine.keys.stats_tasks(t), "default|dtq.fail|dead_lettered") == "1"
    assert redis_client.hget(engine.keys.stats_counters(t), "fenced") is None
    assert f"task_id={task_id} attempt=1 worker_id=resender completion re-sent after a lost reply" in caplog.text
    assert "result discarded" not in caplog.text


def test_with_the_dlq_off_failures_end_failed(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, dlq_enabled=False)
    task_id = engine.tasks.enqueue("dtq.fail").id
    run_burst(cfg)
    assert engine.tasks.get(task_id)["status"] == "FAILED"
    assert redis_client.xlen(engine.keys.dlq(tag(engine, "default"))) == 0


def test_a_handler_timeout_retries_then_dead_letters(config: DtqConfig) -> None:
    engine, cfg = make_engine(config, retry_base_s=0.01, retry_max_s=0.02)
    task_id = engine.tasks.enqueue("dtq.sleep", {"seconds": 5}, timeout_seconds=0.2, max_attempts=2).id
    started = time.monotonic()
    run_burst(cfg)
    assert time.monotonic() - started < 4
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED"
    assert [e["error"] for e in task["errors"]] == ["dtq.HandlerTimeout", "dtq.HandlerTimeout"]
    # The traceback shows where the handler was waiting when it was cut off, not just the message.
    tb = task["errors"][0]["traceback"]
    assert 'dtq_tasks/builtins.py", line' in tb and "in sleep\n" in tb and "await asyncio.sleep(seconds)" in tb
    assert tb.rstrip().endswith("HandlerTimeout: handler exceeded its timeout of 0.2s")


def test_sync_handlers_share_a_fixed_set_of_threads_each_attempt_in_a_fresh_context(config: DtqConfig) -> None:
    # Long-lived handler threads run attempt after attempt (most started by the thread that
    # finished the one before, from the backlog): what a handler sets in a context variable
    # must not reach the next attempt on its thread, and current_task() is each attempt's own.
    leaked: contextvars.ContextVar[str] = contextvars.ContextVar("leaked", default="")
    seen: list[tuple[str, str, str]] = []

    def mark(payload: Any) -> None:
        ctx = dtq_tasks.current_task()
        assert ctx is not None
        seen.append((threading.current_thread().name, leaked.get(), ctx.task_id))
        leaked.set(ctx.task_id)

    registry.register("test.mark", mark)
    engine, cfg = make_engine(config)
    ids = [engine.tasks.enqueue("test.mark", {}).id for _ in range(60)]
    run_burst(cfg, concurrency=3)
    assert [engine.tasks.get(t)["status"] for t in ids] == ["SUCCEEDED"] * 60
    assert {previous for _, previous, _ in seen} == {""}
    assert sorted(task_id for _, _, task_id in seen) == sorted(ids)
    assert len({thread for thread, _, _ in seen}) <= 3  # no thread per attempt, no pool growth


def test_a_sync_handler_timeout_detaches_the_thread(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("dtq.sleep_sync", {"seconds": 1.5}, timeout_seconds=0.2, max_attempts=1).id
    started = time.monotonic()
    run_burst(cfg)
    assert time.monotonic() - started < 1.4  # the worker did not wait for the thread
    error = engine.tasks.get(task_id)["errors"][0]
    assert error["error"] == "dtq.HandlerTimeout"
    # The thread's stack at the timeout: the line it was stuck on.
    assert "in sleep_sync\n" in error["traceback"] and "time.sleep(seconds)" in error["traceback"]
    assert error["traceback"].rstrip().endswith("HandlerTimeout: handler exceeded its timeout of 0.2s")


def test_a_worker_whose_every_slot_held_a_detached_thread_takes_work_again_when_they_finish(
        config: DtqConfig) -> None:
    # Detached threads hold their slots until they end; when the last one ends, the consumer
    # must wake up, not wait for a slot event nobody sends (a wedged worker that still beats).
    engine, cfg = make_engine(config)
    stuck = [engine.tasks.enqueue("dtq.sleep_sync", {"seconds": 2}, timeout_seconds=0.1, max_attempts=1).id
             for _ in range(2)]

    async def scenario() -> str:
        async with running_worker(cfg, concurrency=2) as worker:
            for t in stuck:
                assert await status_once(engine, t, lambda s: s == "DEAD_LETTERED") == "DEAD_LETTERED"
            assert worker.threads.detached == 2  # both slots held by threads still sleeping
            echo = engine.tasks.enqueue("dtq.echo", {"after": "threads"}).id
            return await status_once(engine, echo, lambda s: s == "SUCCEEDED")  # the threads end in ~1.9 s

    assert asyncio.run(scenario()) == "SUCCEEDED"


def test_an_exception_that_cannot_be_printed_still_fails_its_task(config: DtqConfig) -> None:
    class Unprintable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no text")

    async def raise_unprintable(payload: Any) -> None:
        raise Unprintable()

    registry.register("test.unprintable", raise_unprintable)
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("test.unprintable", {}, max_attempts=2).id
    run_burst(cfg, timeout=10)
    task = engine.tasks.get(task_id)
    assert task["status"] == "DEAD_LETTERED" and task["attempt"] == 1
    assert "Unprintable: str() failed" in task["last_error"]


def test_a_retryable_error_can_say_when_to_retry(config: DtqConfig, redis_client: redis.Redis) -> None:
    async def rate_limited(payload: Any) -> None:
        raise dtq_tasks.RetryableError("429 from the mail API", retry_after=payload["after"])

    registry.register("test.rate_limited", rate_limited)
    engine, cfg = make_engine(config, retry_base_s=0.01, retry_max_s=0.01)
    task_id = engine.tasks.enqueue("test.rate_limited", {"after": 30}, max_attempts=3).id
    before_ms = time.time() * 1000
    run_burst(cfg, max_tasks=1)
    task = engine.tasks.get(task_id)
    assert task["status"] == "RETRYING"
    due_ms = redis_client.zscore(engine.keys.schedule(tag(engine, "default")), task_id)
    assert before_ms + 29_000 < due_ms < time.time() * 1000 + 30_500  # not the 10 ms backoff
    # The last attempt still dead-letters, whatever the handler asks for.
    last = engine.tasks.enqueue("test.rate_limited", {"after": 30}, max_attempts=1).id
    run_burst(cfg, max_tasks=1)
    assert engine.tasks.get(last)["status"] == "DEAD_LETTERED"


@pytest.mark.parametrize(("after", "used"), [
    (30, 30.0), (0.5, 0.5), ("120", 120.0),  # a Retry-After header's seconds
    (-1, None), (True, None), (float("nan"), None), (400 * 86400, None), ("Wed, 21 Oct 2026 07:28:00 GMT", None),
])
def test_retry_after_takes_seconds_and_ignores_anything_else(after: Any, used: float | None) -> None:
    # Raising RetryableError must never fail: that would make a rate-limited call a permanent failure.
    assert dtq_tasks.RetryableError("x", retry_after=after).retry_after == used


def test_a_claim_held_through_a_stall_is_checked_before_its_handler_starts(config: DtqConfig) -> None:
    # A worker stopped (SIGSTOP, a blocked loop) between receiving its claim and starting the handler
    # may find that a peer reclaimed the entry and cancelled or finished the task meanwhile.
    engine, cfg = make_engine(config)
    taken_over = engine.tasks.enqueue("test.record", {"n": "taken over"}, queue="elsewhere").id
    still_ours = engine.tasks.enqueue("test.record", {"n": "still ours"}, queue="elsewhere").id

    async def scenario() -> None:
        async with running_worker(cfg, queues=["default"]) as worker:
            engine.tasks.cancel(taken_over, Actor.cli())  # what a peer's reclaim of a pending cancel leaves behind
            engine.client.hset(engine.keys.task(still_ours), mapping={
                "status": "RUNNING", "attempt": 1, "worker_id": worker.worker_id})
            for task_id in (taken_over, still_ours):
                worker._start(stale_row(engine, task_id, "elsewhere"))
            assert await status_once(engine, still_ours, lambda s: s == "SUCCEEDED") == "SUCCEEDED"

    asyncio.run(scenario())
    assert RECORDED == [{"n": "still ours"}]  # the cancelled task's handler never started
    assert engine.tasks.get(taken_over)["status"] == "CANCELLED"


def test_a_cancel_that_lands_while_a_stale_claim_is_checked_still_cancels_the_task(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("test.record", {"n": "cancelled"}, queue="elsewhere").id

    async def scenario() -> str:
        async with running_worker(cfg, queues=["default"]) as worker:
            engine.client.hset(engine.keys.task(task_id), mapping={
                "status": "RUNNING", "attempt": 1, "worker_id": worker.worker_id})
            assert engine.tasks.cancel(task_id, Actor.cli()).status == "RUNNING"  # recorded for the owner's watcher
            checking = worker.store.claim_still_ours

            async def slow_check(row: Row) -> bool:  # a slow Redis: the watcher acts meanwhile
                await asyncio.sleep(1.0)
                return await checking(row)

            worker.store.claim_still_ours = slow_check  # type: ignore[method-assign]
            worker._start(stale_row(engine, task_id, "elsewhere"))
            return await status_once(engine, task_id, lambda s: s != "RUNNING", timeout=5)

    assert asyncio.run(scenario()) == "CANCELLED"
    assert RECORDED == []


def test_a_timeout_records_the_stack_of_its_own_attempt_only() -> None:
    # A pool thread that has moved on to another attempt must not lend that one's stack.
    from dtq_core.worker.executor import Execution, _in_thread, _thread_stack

    row = Row(entry_id="1-1", stream="s", task_id="t", attempt=1, max_attempts=1, type="x", payload="",
              timeout_s=1.0, queue="q", priority="normal")
    mine, other = Execution(row=row, in_thread=True), Execution(row=row, in_thread=True)
    release = threading.Event()

    def stuck_here(_: Any) -> None:
        release.wait(10)

    thread = threading.Thread(target=_in_thread, args=(other, stuck_here, None))
    thread.start()
    try:
        wait_for(lambda: other.thread_id)
        assert "in stuck_here" in _thread_stack(other) and "release.wait(10)" in _thread_stack(other)
        # As if mine were on this thread but had returned: its frame is not on the thread's stack.
        mine.thread_id, mine.thread_frame = other.thread_id, sys._getframe()
        assert _thread_stack(mine).startswith("  (no stack:")
        assert _thread_stack(Execution(row=row, in_thread=True)).startswith("  (no stack:")  # not started
    finally:
        release.set()
        thread.join(10)


def test_a_task_past_its_ttl_expires_without_running(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("test.record", {"x": 1}, ttl_seconds=0.05).id
    time.sleep(0.1)  # let the ttl pass before any worker exists
    run_burst(cfg)
    assert engine.tasks.get(task_id)["status"] == "EXPIRED" and RECORDED == []
    assert engine.client.hget(engine.keys.stats_tasks(tag(engine, "default")), "default|test.record|expired") == "1"


def test_a_delayed_task_past_its_ttl_expires_in_the_scheduler(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("test.record", {"x": 1}, delay_seconds=0.05, ttl_seconds=0.06).id
    time.sleep(0.1)  # due, and past its ttl, before the scheduler looks
    run_burst(cfg)
    assert engine.tasks.get(task_id)["status"] == "EXPIRED" and RECORDED == []
    assert engine.client.hget(engine.keys.stats_tasks(tag(engine, "default")), "default|test.record|expired") == "1"


def test_large_results_are_truncated_and_flagged(config: DtqConfig) -> None:
    engine, cfg = make_engine(config, result_max_bytes=100)
    task_id = engine.tasks.enqueue("test.big", {"n": 1000}).id
    run_burst(cfg)
    task = engine.tasks.get(task_id)
    assert task["status"] == "SUCCEEDED" and task["result_truncated"] is True
    assert isinstance(task["result"], str) and 50 < len(task["result"]) <= 100


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    def __repr__(self) -> str:
        return "<Unprintable>"


def circular() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize(("value", "stored"), [
    ({(1, 2): 3}, "{(1, 2): 3}"),              # keys JSON cannot hold
    (circular(), "[[...]]"),
    (Unprintable(), "<Unprintable>"),            # str() raises: repr()
    (float("nan"), "nan"),                       # NaN/Infinity are not JSON: stored they broke the API
    ({"x": float("-inf")}, "{'x': -inf}"),
])
def test_a_result_json_cannot_hold_is_stored_through_str(config: DtqConfig, value: Any, stored: str) -> None:
    # It should succeed on the first attempt: the handler's side effects already happened.
    async def odd(payload: Any) -> Any:
        RECORDED.append(payload)
        return value

    registry.register("test.odd", odd)
    engine, cfg = make_engine(config, visibility_timeout_s=2, heartbeat_interval_s=0.5)
    task_id = engine.tasks.enqueue("test.odd", {}).id
    run_burst(cfg, timeout=10)
    task = engine.tasks.get(task_id)
    assert (task["status"], task["attempt"], task["result"], len(RECORDED)) == ("SUCCEEDED", 1, stored, 1)
    assert engine.client.get(engine.keys.result(task_id)) == json.dumps(stored)  # valid JSON, no NaN


@pytest.mark.parametrize("text", ['"' * 500, "\\" * 500, "\u00e9" * 500, "\n\x01" * 500])
def test_a_truncated_result_fits_the_limit(config: DtqConfig, text: str) -> None:
    # Escaping grows the head (a quote takes two bytes, a control character six): it must still fit.
    registry.register("test.text", lambda payload: text)
    engine, cfg = make_engine(config, result_max_bytes=200)
    task_id = engine.tasks.enqueue("test.text", {}).id
    run_burst(cfg)
    raw = engine.client.get(engine.keys.result(task_id))
    task = engine.tasks.get(task_id)
    assert task["status"] == "SUCCEEDED" and task["result_truncated"] is True
    assert 150 < len(raw.encode()) <= 200 and json.loads(raw) == task["result"]
    assert json.dumps(text, ensure_ascii=False).startswith(task["result"])


def test_text_utf8_cannot_hold_is_replaced_not_stuck(config: DtqConfig) -> None:
    # It should still record the outcome (with '?' for the lone surrogate), never retry the write forever.
    engine, cfg = make_engine(config)
    ok = engine.tasks.enqueue("test.undecodable", {}).id
    bad = engine.tasks.enqueue("test.undecodable", {"fail": True}).id
    run_burst(cfg)
    assert engine.tasks.get(ok)["result"] == "caf?"
    failed = engine.tasks.get(bad)
    assert failed["status"] == "DEAD_LETTERED" and failed["last_error"] == "ValueError: bad caf?"


def test_high_before_normal_before_low(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    for priority in ("low", "normal", "high", "low", "high", "normal"):
        engine.tasks.enqueue("test.record", priority, priority=priority)
    run_burst(cfg, concurrency=1)
    assert RECORDED == ["high", "high", "normal", "normal", "low", "low"]


def test_a_paused_queue_is_skipped_until_resumed(config: DtqConfig) -> None:
    from dtq_core.engine.audit import Actor

    engine, cfg = make_engine(config)
    engine.tasks.enqueue("test.record", "paused-work", queue="slow")
    engine.tasks.enqueue("test.record", "other-work", queue="fast")
    engine.queues.pause("slow", Actor.cli())
    run_burst(cfg)
    assert RECORDED == ["other-work"]
    assert engine.queues.stats(["slow"])[0]["waiting"] == 1
    engine.queues.resume("slow", Actor.cli())
    run_burst(cfg)
    assert RECORDED == ["other-work", "paused-work"]


def test_duplicate_entries_are_absorbed_not_run(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("test.record", "once").id
    stream = engine.keys.stream(tag(engine, "default"), "default", "normal")
    redis_client.xadd(stream, {"task_id": task_id, "attempt": 1})  # e.g. a scheduler split-brain duplicate
    run_burst(cfg, concurrency=1)
    assert RECORDED == ["once"]
    redis_client.xadd(stream, {"task_id": task_id, "attempt": 1})  # and one after it finished
    run_burst(cfg)
    assert RECORDED == ["once"] and engine.tasks.get(task_id)["status"] == "SUCCEEDED"
    assert int(redis_client.hget(engine.keys.stats_counters(tag(engine, "default")), "absorbed")) == 2
    assert redis_client.xlen(stream) == 0


def test_sync_handlers_run_in_the_pool_and_see_their_context(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("test.where", queue="ctx").id
    run_burst(cfg)
    result = engine.tasks.get(task_id)["result"]
    assert result["thread"].startswith("dtq-handler")
    assert (result["task_id"], result["attempt"], result["queue"]) == (task_id, 1, "ctx")


def test_delayed_tasks_run_after_their_delay(config: DtqConfig) -> None:
    engine, cfg = make_engine(config, scheduler_interval_s=0.05)
    task_id = engine.tasks.enqueue("test.record", "later", delay_seconds=0.3).id
    assert engine.tasks.get(task_id)["status"] == "PENDING"
    started = time.monotonic()
    run_burst(cfg)
    assert RECORDED == ["later"] and time.monotonic() - started >= 0.25


def test_worker_only_serves_its_queues(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    engine.tasks.enqueue("test.record", "a", queue="qa")
    engine.tasks.enqueue("test.record", "b", queue="qb")
    run_burst(cfg, queues=["qa"])
    assert RECORDED == ["a"]


def test_idempotent_operation_runs_once_per_key(live_engine: Engine) -> None:
    calls: list[int] = []

    def effect() -> dict[str, int]:
        calls.append(1)
        return {"n": len(calls)}

    first = dtq_tasks.idempotent_operation("charge-1", effect)
    second = dtq_tasks.idempotent_operation("charge-1", effect)
    assert first == second == {"n": 1} and len(calls) == 1
    assert dtq_tasks.idempotent_operation("charge-2", effect) == {"n": 2}


def test_idempotent_operation_takes_a_lease_under_a_millisecond(live_engine: Engine, redis_client: redis.Redis) -> None:
    # It should: 0.0005 s is in range (above 0), and is held for 1 ms (Redis refuses SET ... PX 0).
    key = live_engine.keys.operation("short-lease")
    lease_ttl: list[int] = []

    def effect() -> int:
        lease_ttl.append(redis_client.pttl(key))
        return 5

    assert dtq_tasks.idempotent_operation("short-lease", effect, lease_seconds=0.0005) == 5
    assert lease_ttl[0] in (-2, 0, 1)  # a 1 ms lease (-2: it ran out before PTTL read it)


def test_idempotent_operation_releases_the_key_when_fn_fails(live_engine: Engine) -> None:
    def boom() -> None:
        raise RuntimeError("no")

    with pytest.raises(RuntimeError):
        dtq_tasks.idempotent_operation("k", boom)
    assert dtq_tasks.idempotent_operation("k", lambda: 7) == 7


@pytest.mark.single_node
def test_a_failed_caller_never_releases_the_lease_of_the_caller_after_it(
        live_engine: Engine, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # It should: the first caller's lease expires while its release is under way (right after
    # the release's first round trip) and a second caller takes the key; the release, a compare
    # and delete, leaves the second caller's lease alone, so no third caller can run fn beside it.
    key = live_engine.keys.operation("shared")
    client = AfterCall(connection_pool=live_engine.client.connection_pool)
    monkeypatch.setattr(live_engine, "client", client)
    monkeypatch.setattr(live_engine, "scripts", Scripts(client))
    second_may_finish = threading.Event()
    runs: list[str] = []

    def second() -> str:
        runs.append("second")
        second_may_finish.wait(10)
        return "second"

    def lease_expires_and_second_caller_takes_it() -> None:
        redis_client.delete(key)  # the first caller's lease ran out
        threading.Thread(target=dtq_tasks.idempotent_operation, args=("shared", second), daemon=True).start()
        wait_for(lambda: "second" in runs, timeout=10)

    def first() -> None:
        runs.append("first")
        client.key, client.then = key, lease_expires_and_second_caller_takes_it
        raise RuntimeError("first caller failed")

    with pytest.raises(RuntimeError, match="first caller failed"):
        dtq_tasks.idempotent_operation("shared", first)
    lease = redis_client.get(key)
    assert lease is not None and "running" in json.loads(lease)  # the second caller's lease stands
    third = threading.Thread(target=dtq_tasks.idempotent_operation, args=("shared", lambda: runs.append("third")),
                             daemon=True)
    third.start()
    time.sleep(0.3)  # give a third caller every chance to run fn beside the second (it must not)
    assert runs == ["first", "second"]
    second_may_finish.set()
    third.join(10)
    assert runs == ["first", "second"] and json.loads(redis_client.get(key))["result"] == "second"


def test_async_idempotent_operation(live_engine: Engine) -> None:
    calls: list[int] = []

    async def effect() -> int:
        calls.append(1)
        return 5

    async def twice() -> list[int]:
        return [await dtq_tasks.aidempotent_operation("a-1", effect) for _ in range(2)]

    assert asyncio.run(twice()) == [5, 5] and len(calls) == 1


def test_idempotent_operation_stores_a_result_json_cannot_hold(live_engine: Engine) -> None:
    # It should mark the key done (the effect happened), so a later caller gets the result, not a rerun.
    calls: list[int] = []

    def effect() -> dict[tuple[int, int], int]:
        calls.append(1)
        return {(1, 2): 3}

    first = dtq_tasks.idempotent_operation("odd-1", effect)
    second = dtq_tasks.idempotent_operation("odd-1", effect)
    assert first == second == "{(1, 2): 3}" and len(calls) == 1

    async def nan() -> float:
        calls.append(1)
        return float("nan")

    async def twice() -> list[Any]:
        return [await dtq_tasks.aidempotent_operation("odd-2", nan) for _ in range(2)]

    assert asyncio.run(twice()) == ["nan", "nan"] and len(calls) == 2


def test_idempotent_operation_hands_the_first_caller_the_stored_form(live_engine: Engine) -> None:
    # It should return what a later caller will read, so code after it behaves the same on a rerun.
    first = dtq_tasks.idempotent_operation("form-1", lambda: {1: (2, 3)})
    assert first == dtq_tasks.idempotent_operation("form-1", lambda: None) == {"1": [2, 3]}


def test_enqueue_helper_returns_the_task_id(live_engine: Engine) -> None:
    task_id = dtq_tasks.enqueue("dtq.echo", {"a": 1}, queue="helpers", priority="low", max_attempts=2)
    task = live_engine.tasks.get(task_id)
    assert (task["queue"], task["priority"], task["max_attempts"]) == ("helpers", "low", 2)


def test_idempotent_operation_lease_is_configurable(live_engine: Engine, redis_client: redis.Redis) -> None:
    seen: list[int] = []

    def effect() -> int:
        seen.append(redis_client.pttl(live_engine.keys.operation("lease-1")))
        return 1

    assert dtq_tasks.idempotent_operation("lease-1", effect, lease_seconds=5) == 1
    assert 0 < seen[0] <= 5000  # the lease held while fn ran
    with pytest.raises(ValueError, match="lease_seconds"):
        dtq_tasks.idempotent_operation("lease-2", effect, lease_seconds=0)


def test_the_timeout_check_cancels_only_attempts_past_their_deadline() -> None:
    # It should cancel an overdue attempt once, and leave running ones and finished ones alone.
    from dtq_core.worker.executor import Execution, expire_overdue

    async def scenario() -> tuple[int, int, list[bool]]:
        row = Row(entry_id="1-0", stream="s", task_id="t", attempt=1, max_attempts=1, type="x", payload="",
                  timeout_s=1.0, queue="q", priority="normal")
        overdue, on_time = Execution(row, deadline=10.0), Execution(row, deadline=30.0)
        done = Execution(row, deadline=5.0)
        for ex in (overdue, on_time):
            ex.task = asyncio.create_task(asyncio.sleep(60))
        done.task = asyncio.create_task(asyncio.sleep(0))
        await asyncio.sleep(0.01)
        first = expire_overdue([overdue, on_time, done], now=20.0)
        second = expire_overdue([overdue, on_time, done], now=20.0)
        await asyncio.sleep(0)
        flags = [overdue.task.cancelled(), on_time.task.cancelled(), overdue.timed_out]
        on_time.task.cancel()
        return first, second, flags

    first, second, flags = asyncio.run(scenario())
    assert (first, second) == (1, 0)
    assert flags == [True, False, True]


def test_a_timeout_under_a_second_fires_on_time(engine: Engine, config: DtqConfig) -> None:
    # It should not wait for the 50 ms deadline check: a 20 ms timeout ends a 0.3 s handler.
    from dtq_core.worker.executor import AttemptRunner, Execution

    async def scenario() -> tuple[str, float]:
        row = Row(entry_id="1-0", stream="s", task_id="t", attempt=1, max_attempts=1, type="dtq.sleep",
                  payload='{"seconds": 0.3}', timeout_s=0.02, queue="q", priority="normal")
        runner = AttemptRunner(config, engine.clock, "w")
        ex = Execution(row)
        started = time.monotonic()
        ex.task = asyncio.create_task(runner.run(ex))  # no worker: no periodic deadline check either
        completion = await ex.task
        assert completion is not None
        return completion.error_class, time.monotonic() - started

    error_class, elapsed = asyncio.run(scenario())
    assert error_class == "dtq.HandlerTimeout"
    assert elapsed < 0.2


def test_a_worker_whose_loop_stalled_does_not_reclaim_what_it_is_running(config: DtqConfig,
                                                                         redis_client: redis.Redis) -> None:
    # A handler that blocks the event loop past the visibility timeout delays the heartbeat that
    # keeps this worker's entries fresh. Its own reaper must not take them for a dead worker's:
    # that would run the other task a second time beside the first, and charge a WorkerLost.
    engine, cfg = make_engine(config, visibility_timeout_s=1.0, heartbeat_interval_s=0.9)

    async def stall(payload: Any) -> str:
        time.sleep(2.5)  # blocks the loop, as careless async code does
        return "stalled"

    async def steady(payload: Any) -> int:
        RECORDED.append("steady started")
        await asyncio.sleep(3.5)
        return 1

    registry.register("test.stall", stall)
    registry.register("test.steady", steady)
    steady_id = engine.tasks.enqueue("test.steady").id
    stall_id = engine.tasks.enqueue("test.stall").id
    run_burst(cfg)
    for task_id in (steady_id, stall_id):
        task = engine.tasks.get(task_id)
        assert task["status"] == "SUCCEEDED" and task["attempt"] == 1 and task["errors"] == [], task
    assert RECORDED == ["steady started"]
    assert not redis_client.hget(engine.keys.stats_counters(tag(engine, "default")), "redeliveries")


@pytest.mark.parametrize(("heartbeat_s", "visibility_s"), [
    (5, 30), (0.5, 2), (2.5, 3), (5, 12), (4.9, 5), (0.05, 0.1), (29, 30), (1, 100)])
def test_every_freeze_that_can_age_live_entries_past_the_timeout_shows_as_a_heartbeat_gap(
        config: DtqConfig, heartbeat_s: float, visibility_s: float) -> None:
    # Beats every h; a freeze of F leaves a live owner's entries up to F + h old, reclaimable once
    # past v. Any such freeze (F > v - h) must exceed the gap threshold g, which every worker sees
    # in its own beats (g <= v - h), while a beat a little late is not a gap (g > h). Any h < v
    # passes the config validator, so heartbeats close to the timeout must work too.
    timings = dataclasses.replace(config, heartbeat_interval_s=heartbeat_s, visibility_timeout_s=visibility_s)
    h, g = timings.heartbeat_every_s, timings.beat_gap_s
    assert 0 < h <= heartbeat_s and h <= visibility_s / 3
    assert h < g <= visibility_s - h
    assert g - h >= min(1.0, visibility_s / 6) - 1e-9  # room for a late beat


@pytest.mark.parametrize("wait", ["fetch", "wait_and_fetch"])
def test_rows_a_fetch_claimed_while_a_stop_came_are_handed_back_not_started(
        wait: str, config: DtqConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    # SIGTERM's handler runs while a fetch's reply is on its way: the worker is stopping by the
    # time the claimed rows reach the consumer. They must go back as a drain's backlog does.
    from dtq_core.worker.store import Fetched, WorkerStore

    engine, cfg = make_engine(config)
    # Two queues: an idle worker waits on the channel, then fetches (store.fetch); one queue of
    # one partition: it waits on the wake list with its fetch queued behind (wait_and_fetch).
    worker = Worker(cfg, queues=["stopq", *(["otherq"] if wait == "fetch" else [])], concurrency=1, name="stopper")
    real = getattr(WorkerStore, wait)
    target: list[str] = []
    seen: list[str] = []

    async def stop_when_claimed(store: WorkerStore, *args: Any, **kwargs: Any) -> Fetched:
        fetched: Fetched = await real(store, *args, **kwargs)
        if any(row.task_id in target for row in fetched.rows):
            seen.append(wait)
            worker.request_stop()
        return fetched

    monkeypatch.setattr(WorkerStore, wait, stop_when_claimed)

    async def scenario() -> None:
        run = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 10
        while not (worker.state == "running" and (wait == "fetch" or worker.wake.holding is not None)):
            assert time.monotonic() < deadline, worker.state
            await asyncio.sleep(0.01)
        target.append(engine.tasks.enqueue("test.record", {"n": 1}, queue="stopq").id)
        await asyncio.wait_for(run, 30)

    asyncio.run(scenario())
    shown = engine.tasks.get(target[0])
    assert seen == [wait]
    assert (RECORDED, shown["status"], shown["attempt"], shown["errors"]) == ([], "QUEUED", 0, [])


def test_a_hand_back_that_keeps_failing_does_not_stop_the_cancel_watcher(
        config: DtqConfig, monkeypatch: pytest.MonkeyPatch) -> None:
    # A withheld row whose hand-back fails (on a cluster, its partition's master is down) must
    # not keep the watcher from the cancels of the attempts it runs elsewhere (within 0.25 s).
    from dtq_core.worker.store import WorkerStore

    async def hang(payload: Any) -> Any:
        await asyncio.sleep(payload.get("seconds", 30))
        return "done"

    registry.register("test.hang", hang)
    engine = Engine(config)
    # Every start goes through the stale-claim check (as after a stall), so that a cancel landing
    # just before it sends the row down the new `if not ours:` branch: withheld, handed back.
    monkeypatch.setattr(DtqConfig, "stale_start_s", property(lambda self: -1.0))
    doomed: list[str] = []
    real_check = WorkerStore.claim_still_ours
    real_return = WorkerStore.return_unstarted

    async def check(store: WorkerStore, row: Any) -> bool:
        if row.task_id in doomed:  # its cancel lands just before the check
            engine.tasks.cancel(row.task_id, Actor.cli())
        return await real_check(store, row)

    async def give_back(store: WorkerStore, rows: Any) -> int:
        # The doomed task's partition lives on a master that is down: the pipeline raises.
        if any(row.task_id in doomed for row in rows):
            raise redis.ConnectionError("master of the doomed task's partition is down")
        return await real_return(store, rows)

    monkeypatch.setattr(WorkerStore, "claim_still_ours", check)
    monkeypatch.setattr(WorkerStore, "return_unstarted", give_back)

    async def scenario() -> tuple[str, str, int]:
        worker = Worker(config, queues=["healthyq", "downq"], concurrency=4, name="watcher")
        run = asyncio.create_task(worker.run())
        try:
            deadline = time.monotonic() + 10
            while worker.state != "running":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            victim = engine.tasks.enqueue("test.hang", {"seconds": 30}, queue="downq").id
            doomed.append(victim)
            deadline = time.monotonic() + 10
            while not any(row.task_id == victim for row in worker._withheld):
                assert time.monotonic() < deadline, "the doomed row never got withheld"
                await asyncio.sleep(0.01)
            long = engine.tasks.enqueue("test.hang", {"seconds": 30}, queue="healthyq").id
            deadline = time.monotonic() + 10
            while not any(ex.row.task_id == long for ex in worker._running.values()):
                assert time.monotonic() < deadline, "the healthy task never started"
                await asyncio.sleep(0.01)
            engine.tasks.cancel(long, Actor.cli())
            # Promised within 0.25 s; give it 3 s (12 polls).
            deadline = time.monotonic() + 3
            while (shown := str(engine.tasks.get(long)["status"])) != "CANCELLED" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            return shown, str(engine.tasks.get(victim)["status"]), len(worker._withheld)
        finally:
            doomed.clear()  # the "master" is back: let the drain finish
            worker.request_stop()
            await asyncio.wait_for(run, 20)

    shown, victim_status, withheld = asyncio.run(scenario())
    assert withheld == 1 and victim_status == "RUNNING"  # the doomed row is still withheld
    assert shown == "CANCELLED", f"the healthy task's cancel was not seen within 3 s: status {shown}"
