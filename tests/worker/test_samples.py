"""The statistics' samples of a worker's completions (dtq_core/worker/samples.py): returned by
completeTasks, summed by the worker and written about once a second with flushStats: counted
once, under the partition's type cap, kept through a Redis outage, dropped for a deleted queue,
and written by a worker that drains on SIGTERM."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import dtq_tasks  # noqa: F401 - registers the built-in task types in this process
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.task import Outcome
from dtq_core.worker import execution
from dtq_core.worker.executor import Completion, Row
from dtq_core.worker.runtime import Worker
from dtq_core.worker.samples import MAX_MINUTES, Samples
from dtq_core.worker.store import WorkerStore
from tests.redis_server import RedisServer

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST
from .support import fetch, partitions, store, until


def _done(rows: list[Row], outcome: Outcome = Outcome.SUCCEEDED) -> list[Completion]:
    return [Completion(r, outcome, result_json="null", duration_s=0.004) for r in rows]


def _history(client: redis.Redis, engine: Engine, tag: str, minutes: range) -> dict[str, int]:
    """The partition's history counts over these minutes, by field."""
    counts: dict[str, int] = {}
    for m in minutes:
        for name, n in client.hgetall(f"{engine.keys.history(tag)}m:{m}").items():
            counts[name] = counts.get(name, 0) + int(n)
    return counts


def _finished(client: redis.Redis, engine: Engine, tag: str, queue: str, minutes: range) -> int:
    return sum(int(client.hget(engine.keys.throughput(tag, m), queue) or 0) for m in minutes)


def _minutes(began_s: float) -> range:
    return range(int(began_s // 60), int(time.time() // 60) + 1)


async def _complete(worker_store: WorkerStore, engine: Engine, queue: str, n: int) -> list[object]:
    for _ in range(n):
        engine.tasks.enqueue("dtq.echo", queue=queue)
    rows = await fetch(worker_store, partitions(engine, queue), n)
    assert len(rows) == n
    return await worker_store.complete(_done(rows))


def test_samples_land_once_with_the_write_and_outcome_counts_at_once(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    began = time.time()
    (served,) = partitions(engine, "smp")
    worker_store = store(config)

    async def complete_then_write_twice() -> tuple[list[object], dict[str, int], str | None, tuple[int, int]]:
        try:
            statuses = await _complete(worker_store, engine, "smp", 3)
            # The outcome counts (dtq_tasks_total) are the completion's own, exact at once; the
            # samples wait for the worker's write.
            outcome = redis_client.hget(engine.keys.stats_tasks(served.tag), "smp|dtq.echo|succeeded")
            before = _history(redis_client, engine, served.tag, _minutes(began))
            return statuses, before, outcome, (await worker_store.write_samples(), await worker_store.write_samples())
        finally:
            await worker_store.aclose()

    statuses, before, outcome, writes = asyncio.run(complete_then_write_twice())
    assert statuses == ["SUCCEEDED"] * 3 and outcome == "3" and before == {}
    assert writes == (1, 0)  # one partition, then nothing left to write
    history = _history(redis_client, engine, served.tag, _minutes(began))
    assert history["dtq.echo|s"] == 3
    assert sum(n for name, n in history.items() if name.startswith("dtq.echo|r")) == 3  # run times
    assert sum(n for name, n in history.items() if name.startswith("dtq.echo|w")) == 3  # wait times
    assert _finished(redis_client, engine, served.tag, "smp", _minutes(began)) == 3
    duration = redis_client.hgetall(engine.keys.stats_duration(served.tag))
    assert duration["le_0.005"] == "3" and float(duration["sum"]) == pytest.approx(0.012)


def test_a_type_past_the_partition_s_cap_is_counted_as_other(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    began = time.time()
    (served,) = partitions(engine, "capped")
    types_key = engine.keys.history_types(served.tag)
    redis_client.sadd(types_key, *[f"t{i}" for i in range(100)])
    worker_store = store(config)

    async def complete_and_write() -> tuple[list[object], int]:
        try:
            return await _complete(worker_store, engine, "capped", 2), await worker_store.write_samples()
        finally:
            await worker_store.aclose()

    assert asyncio.run(complete_and_write()) == (["SUCCEEDED"] * 2, 1)
    history = _history(redis_client, engine, served.tag, _minutes(began))
    assert history["(other)|s"] == 2 and "dtq.echo|s" not in history
    assert redis_client.scard(types_key) == 100 and not redis_client.sismember(types_key, "(other)")


def test_samples_of_a_deleted_queue_are_dropped_not_written(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    began = time.time()
    (served,) = partitions(engine, "doomed")
    worker_store = store(config)

    async def complete_delete_and_write() -> tuple[list[object], bool]:
        try:
            statuses = await _complete(worker_store, engine, "doomed", 2)
            engine.queues.delete("doomed", Actor(name="cli:test", source="cli"))
            await worker_store.write_samples()
            return statuses, bool(worker_store.samples)
        finally:
            await worker_store.aclose()

    # Answered (the partition is gone), so nothing is kept to be sent again.
    assert asyncio.run(complete_delete_and_write()) == (["SUCCEEDED"] * 2, False)
    # Nothing of the deleted partition's statistics comes back (no key without an owner to drop it).
    assert _history(redis_client, engine, served.tag, _minutes(began)) == {}
    assert _finished(redis_client, engine, served.tag, "doomed", _minutes(began)) == 0
    assert not redis_client.exists(engine.keys.stats_duration(served.tag))
    assert not redis_client.exists(engine.keys.history_types(served.tag))


def test_a_write_sent_again_after_a_lost_reply_is_not_added_twice(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    began = time.time()
    (served,) = partitions(engine, "resend")
    worker_store = store(config)

    async def write_whose_reply_is_lost() -> tuple[object, object, int, bool]:
        try:
            await _complete(worker_store, engine, "resend", 5)
            ((tag, number, payload),) = worker_store.samples.writes()
            keys, args = [engine.keys.partition(tag)], [payload, worker_store.samples.writer, number]
            landed = await worker_store.scripts("flushStats", keys=keys, args=args)  # its reply never read
            again = await worker_store.scripts("flushStats", keys=keys, args=args)
            # The worker, not knowing, sends it again with its next write.
            return landed, again, await worker_store.write_samples(), bool(worker_store.samples)
        finally:
            await worker_store.aclose()

    assert asyncio.run(write_whose_reply_is_lost()) == (1, -2, 1, False)
    assert _history(redis_client, engine, served.tag, _minutes(began))["dtq.echo|s"] == 5
    assert _finished(redis_client, engine, served.tag, "resend", _minutes(began)) == 5


def test_a_failed_completion_call_keeps_the_samples_of_the_calls_that_landed(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    # Two partitions, one call each; one call fails (its limits key is of the wrong type, so the
    # script stops at its first read). The batch is sent again by the worker, and the records of
    # the call that landed come back "resent", with no samples: they are kept from this reply.
    config = dataclasses.replace(config, queue_partitions=(("pair", 2),))
    engine = Engine(config)
    began = time.time()
    served = partitions(engine, "pair")
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", {"n": n}, queue="pair") for n in range(8)])
    worker_store = store(config)

    async def complete_with_one_call_failing() -> tuple[dict[str, int], str]:
        try:
            rows = await fetch(worker_store, served, 8)
            by_tag = {p.tag: sum(1 for r in rows if r.partition_tag == p.tag) for p in served}
            broken = rows[0].partition_tag  # the first call the worker sends
            redis_client.set(engine.keys.limits(broken), "not a hash")
            with pytest.raises(redis.exceptions.ResponseError):
                await worker_store.complete(_done(rows))
            await worker_store.write_samples()
            return by_tag, broken
        finally:
            await worker_store.aclose()

    by_tag, broken = asyncio.run(complete_with_one_call_failing())
    assert sum(by_tag.values()) == 8 and all(by_tag.values()), by_tag  # both partitions hold tasks
    for tag, n in by_tag.items():
        want = 0 if tag == broken else n
        assert _history(redis_client, engine, tag, _minutes(began)).get("dtq.echo|s", 0) == want, by_tag
        assert _finished(redis_client, engine, tag, "pair", _minutes(began)) == want, by_tag


def test_samples_kept_through_an_outage_are_bounded_to_the_history_s_lifetime() -> None:
    # Minutes older than the history keeps (25 h) would expire before anyone read them: a worker
    # cut off from Redis for longer keeps the newest MAX_MINUTES of each partition, not all.
    samples = Samples("w-bound")
    reply = json.dumps({"h": {"dtq.echo|s": 1}, "f": {"q": 1}, "b": {"le_0.005": 1}, "s": 0.001})
    for minute in range(MAX_MINUTES + 100):
        samples.add("t1", minute, reply)
    ((tag, number, payload),) = samples.writes()
    written = json.loads(payload)
    assert (tag, number) == ("t1", 1)
    assert [m[0] for m in written["m"]] == list(range(100, MAX_MINUTES + 100))  # the newest, in order
    assert all(m[1] == {"dtq.echo|s": 1} and m[2] == {"q": 1} for m in written["m"])
    assert written["b"] == {"le_0.005": MAX_MINUTES + 100}  # run times are not by minute: none dropped


@dataclasses.dataclass
class OwnRedis:
    server: RedisServer
    config: DtqConfig
    engine: Engine
    data: redis.Redis


@pytest.fixture
def own_redis(tmp_path: Path, config: DtqConfig) -> Iterator[OwnRedis]:
    """A redis-server of the test's own, append-only: it can be stopped and started again."""
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    try:
        private = dataclasses.replace(config, redis_url=server.url)
        yield OwnRedis(server, private, Engine(private), redis.Redis.from_url(server.url, decode_responses=True))
    finally:
        server.stop()


@pytest.mark.single_node
def test_samples_wait_out_a_redis_outage_and_land_once(own_redis: OwnRedis) -> None:
    server, engine, data = own_redis.server, own_redis.engine, own_redis.data
    began = time.time()
    (served,) = partitions(engine, "out")
    worker_store = store(own_redis.config)

    async def complete_then_write_through_an_outage() -> tuple[list[object], bool, int]:
        try:
            statuses = await _complete(worker_store, engine, "out", 4)
            server.stop()
            with pytest.raises(redis.exceptions.ConnectionError):
                await worker_store.write_samples()
            kept = bool(worker_store.samples)  # for the next write
            server.start()
            return statuses, kept, await worker_store.write_samples()
        finally:
            await worker_store.aclose()

    assert asyncio.run(complete_then_write_through_an_outage()) == (["SUCCEEDED"] * 4, True, 1)
    assert _history(data, engine, served.tag, _minutes(began))["dtq.echo|s"] == 4
    assert _finished(data, engine, served.tag, "out", _minutes(began)) == 4


def test_a_write_that_fails_in_part_is_applied_once_and_says_what_it_left_out(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    # Redis keeps what a script wrote before an error: a write that failed midway and went out
    # again would add its first parts twice. So each part stands alone and the write counts.
    began = time.time()
    (served,) = partitions(engine, "midway")
    worker_store = store(config)
    duration_key = engine.keys.stats_duration(served.tag)

    async def complete_then_write_three_times() -> tuple[int, int, int]:
        try:
            await _complete(worker_store, engine, "midway", 3)
            redis_client.set(duration_key, "not a hash")  # the histogram's part fails
            with caplog.at_level(logging.WARNING, logger="dtq.worker"):
                return (await worker_store.write_samples(), await worker_store.write_samples(),
                        await worker_store.write_samples())
        finally:
            await worker_store.aclose()

    assert asyncio.run(complete_then_write_three_times()) == (1, 0, 0)
    assert f"statistics samples of partition {served.tag} written in part (WRONGTYPE" in caplog.text
    history = _history(redis_client, engine, served.tag, _minutes(began))
    assert history["dtq.echo|s"] == 3
    assert _finished(redis_client, engine, served.tag, "midway", _minutes(began)) == 3
    assert redis_client.get(duration_key) == "not a hash"


def test_a_worker_stopped_by_sigterm_writes_its_samples_before_it_exits(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    engine = live_engine
    began = time.time()
    (served,) = partitions(engine, "term")
    ids = [engine.tasks.enqueue("dtq.echo", queue="term").id for _ in range(30)]
    worker = start_worker("--name", "term", "--queues", "term", **FAST)
    wait_for(lambda: all(engine.tasks.get(i)["status"] == "SUCCEEDED" for i in ids), timeout=30,
             message=worker.output)
    worker.proc.send_signal(signal.SIGTERM)  # as soon as the last completion is written
    assert worker.proc.wait(timeout=30) == 0, worker.output()
    assert _history(redis_client, engine, served.tag, _minutes(began))["dtq.echo|s"] == 30
    assert _finished(redis_client, engine, served.tag, "term", _minutes(began)) == 30


def test_a_draining_worker_writes_the_samples_its_loop_has_not(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # The once-a-second loop held off for an hour: only the drain's own write can land them.
    monkeypatch.setattr(execution, "FLUSH_EVERY_S", 3600.0)
    began = time.time()
    (served,) = partitions(engine, "drained")
    for n in range(12):
        engine.tasks.enqueue("dtq.echo", {"n": n}, queue="drained")
    worker = Worker(config, queues=["drained"], burst=True, name=f"drain-{time.monotonic_ns()}")
    assert asyncio.run(asyncio.wait_for(worker.run(), 60)) == 0
    assert worker.processed == 12
    assert _history(redis_client, engine, served.tag, _minutes(began))["dtq.echo|s"] == 12
    assert _finished(redis_client, engine, served.tag, "drained", _minutes(began)) == 12


@pytest.mark.single_node
def test_a_drain_writes_the_samples_queued_behind_a_write_it_must_send_again(
        own_redis: OwnRedis, monkeypatch: pytest.MonkeyPatch) -> None:
    # A write that failed (Redis restarted under it) goes out again first, and the partition's
    # newer samples wait behind it: the drain must send both, not just the old one. The loop is
    # held off for an hour, so only the test's write and the drain's can land them.
    monkeypatch.setattr(execution, "FLUSH_EVERY_S", 3600.0)
    server, engine, data = own_redis.server, own_redis.engine, own_redis.data
    began = time.time()
    (served,) = partitions(engine, "again")
    worker = Worker(own_redis.config, queues=["again"], name=f"again-{time.monotonic_ns()}")

    def succeeded(ids: list[str]) -> bool:
        try:
            return all(engine.tasks.get(i)["status"] == "SUCCEEDED" for i in ids)
        except redis.exceptions.ConnectionError:
            return False

    async def scenario() -> bool:
        running = asyncio.create_task(worker.run())
        try:
            first = [engine.tasks.enqueue("dtq.echo", {"n": n}, queue="again").id for n in range(3)]
            await until(lambda: succeeded(first), "the first tasks")
            await asyncio.to_thread(server.stop)
            with pytest.raises(redis.exceptions.ConnectionError):
                await worker.store.write_samples()  # its outcome unknown: to be sent again
            await asyncio.to_thread(server.start)
            second = [engine.tasks.enqueue("dtq.echo", {"n": n}, queue="again").id for n in range(3, 5)]
            await until(lambda: succeeded(second), "the tasks after the restart")
            worker.request_stop()  # as SIGTERM
            assert await asyncio.wait_for(running, 30) == 0
            return bool(worker.store.samples)
        finally:
            if not running.done():
                running.cancel()

    assert asyncio.run(scenario()) is False  # none left behind
    assert _history(data, engine, served.tag, _minutes(began))["dtq.echo|s"] == 5
    assert _finished(data, engine, served.tag, "again", _minutes(began)) == 5
