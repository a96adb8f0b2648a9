"""Idle workers wait on one subscription to the wake channel and keep a ready set of partitions
(dtq_core/worker/wake.py): every path that adds a stream entry rings its partition once, a fetch
that reads a partition to its end says so, a wake-up that lands between that clear and its reply
is kept, a lost subscription costs a sweep rather than a task, and a stream deleted by hand gets
its consumer group back."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

from dtq_core.clock import SystemClock, iso
from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.keys import dlq_ref
from dtq_core.scripts import _expand
from dtq_core.worker.wake import WakeSubscription
from tests.conftest import wait_for

from .support import fetch, partitions, store, tag


class Heard:
    """The tags published on the wake channel since it was created (or last cleared)."""

    def __init__(self, client: redis.Redis, channel: str) -> None:
        self.pubsub = client.pubsub()
        self.pubsub.subscribe(channel)
        confirmed = self.pubsub.get_message(timeout=5)  # subscribed before the test publishes anything
        assert confirmed is not None and confirmed["type"] == "subscribe"
        self._tags: list[str] = []

    def tags(self) -> list[str]:
        while (message := self.pubsub.get_message(timeout=0.05)) is not None:
            self._tags.append(message["data"])
        return list(self._tags)

    def clear(self) -> None:
        self.tags()
        self._tags.clear()


@pytest.fixture
def heard(redis_client: redis.Redis, config: DtqConfig) -> Iterator[Heard]:
    listener = Heard(redis_client, Engine(config).keys.wake())
    yield listener
    listener.pubsub.close()


def test_submits_ring_their_partition_once_however_many_arrive(engine: Engine, redis_client: redis.Redis,
                                                               heard: Heard) -> None:
    for _ in range(5):
        engine.tasks.enqueue("dtq.echo", queue="mail")
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue="mail") for _ in range(20)])
    mail = tag(engine, "mail")
    assert heard.tags() == [mail]
    assert redis_client.exists(engine.keys.ready(mail))
    # A delayed task waits in the schedule: nothing to wake a worker for yet.
    engine.tasks.enqueue("dtq.echo", queue="later", delay_seconds=60)
    assert heard.tags() == [mail]
    assert not redis_client.exists(engine.keys.ready(tag(engine, "later")))


def test_a_dlq_retry_rings_the_partition(engine: Engine, redis_client: redis.Redis, heard: Heard) -> None:
    dead = engine.tasks.enqueue("dtq.echo", queue="dead").id
    t = tag(engine, "dead")
    stream = engine.keys.stream(t, "dead", "normal")
    entry = redis_client.xrange(stream)[0][0]
    dlq_id = redis_client.xadd(engine.keys.dlq(t), {"task_id": dead, "queue": "dead", "type": "dtq.echo"})
    redis_client.hset(engine.keys.dlq_counts(t), "dead", 1)
    redis_client.hset(engine.keys.task(dead), mapping={"status": "DEAD_LETTERED", "dlq_entry_id": dlq_id})
    redis_client.xdel(stream, entry)
    redis_client.delete(engine.keys.ready(t))  # as if a worker had drained it
    heard.clear()
    assert engine.dlq.retry(DlqSelection(ids=(dlq_ref(t, dlq_id),)), Actor.cli()) == 1
    assert heard.tags() == [t]


def _wake(config: DtqConfig) -> WakeSubscription:
    return WakeSubscription(async_client(config, read_timeout_s=10), Engine(config).keys.wake(), "w-wake")


def test_an_idle_wait_wakes_on_a_submit(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine = Engine(config)  # the system clock, like the API
    engine.tasks.enqueue("dtq.echo", queue="idle")  # registers the queue
    served = partitions(engine, "idle")
    worker_store, wake = store(config), _wake(config)

    async def scenario() -> tuple[list[str], float, bool]:
        wake.start()
        try:
            wait_for_subscribed = asyncio.get_running_loop().time() + 5
            while not wake.subscribed:
                assert asyncio.get_running_loop().time() < wait_for_subscribed
                await asyncio.sleep(0.01)
            wake.serve(p.tag for p in served)
            assert wake.ready == {served[0].tag}
            ticket = wake.ticket(served[0].tag)
            fetched = await worker_store.fetch([(served[0], 10)])
            assert len(fetched.rows) == 1 and fetched.drained == [served[0].tag]  # what was there before
            wake.drained(served[0].tag, ticket)
            assert wake.ready == set()
            waiting = asyncio.create_task(wake.wait(8))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            started = time.monotonic()
            await asyncio.to_thread(engine.tasks.enqueue, "dtq.echo", {"n": 2}, queue="idle")
            woke = await waiting
            woke_after = time.monotonic() - started
            rows = await fetch(worker_store, served, 10)
            return [r.payload for r in rows], woke_after, woke
        finally:
            await wake.close()
            await worker_store.aclose()

    payloads, woke_after, woke = asyncio.run(scenario())
    assert woke and payloads == ['{"n":2}']
    assert woke_after < 4  # woken by the message, far inside the 8 s wait


def test_a_wait_with_nothing_ready_times_out(config: DtqConfig) -> None:
    wake = _wake(config)

    async def scenario() -> tuple[bool, float]:
        wake.start()
        try:
            started = time.monotonic()
            woke = await wake.wait(0.3)
            return woke, time.monotonic() - started
        finally:
            await wake.close()

    woke, waited = asyncio.run(scenario())
    assert not woke and waited >= 0.25


def test_a_wake_up_after_the_fetch_was_sent_keeps_the_partition_ready(config: DtqConfig) -> None:
    # It should: a submit lands between the fetch script's clear and its reply; its message may
    # reach the worker before the reply. The reply's "drained" must not drop the partition then,
    # or the submit's task would wait for the next wake-up of that partition.
    wake = _wake(config)
    wake.serve(["a", "b"])
    assert wake.ready == {"a", "b"}  # new partitions are swept once
    sent_a, sent_b = wake.ticket("a"), wake.ticket("b")
    wake._woke("a")  # the message arrives before the reply
    wake.drained("a", sent_a)
    wake.drained("b", sent_b)
    assert wake.ready == {"a"}
    wake.drained("a", wake.ticket("a"))  # the next fetch finds it drained: now it goes
    assert wake.ready == set()
    wake._woke("a")  # a message after the reply simply adds it back
    wake._woke("zz")  # a partition this worker does not serve
    assert wake.ready == {"a"}
    # A (re)subscribe marks every served partition ready, and outdates every fetch in flight.
    in_flight = wake.ticket("b")
    wake._resubscribed()
    wake.drained("b", in_flight)
    assert wake.ready == {"a", "b"}
    wake.serve(["b"])
    assert wake.ready == {"b"}


def test_a_lost_subscription_costs_a_sweep_not_a_task(config: DtqConfig, redis_client: redis.Redis) -> None:
    # It should: while the worker's subscription is down (killed here), a submit's message is
    # lost; subscribing again marks every served partition ready, so its task is fetched anyway.
    engine = Engine(config)
    served = partitions(engine, "cut")
    worker_store, wake = store(config), _wake(config)

    async def scenario() -> list[str]:
        wake.start()
        try:
            deadline = time.monotonic() + 5
            while not wake.subscribed:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.01)
            wake.serve(p.tag for p in served)
            ticket = wake.ticket(served[0].tag)
            fetched = await worker_store.fetch([(served[0], 10)])
            wake.drained(served[0].tag, ticket)
            assert fetched.rows == [] and wake.ready == set()
            redis_client.client_kill_filter(_type="pubsub")
            await asyncio.to_thread(engine.tasks.enqueue, "dtq.echo", {"n": 1}, queue="cut")
            assert await wake.wait(8)  # the resubscribe's sweep, not the (lost) message
            return [r.payload for r in await fetch(worker_store, served, 10)]
        finally:
            await wake.close()
            await worker_store.aclose()

    assert asyncio.run(scenario()) == ['{"n":1}']


def test_a_full_batch_leaves_the_partition_ready(engine: Engine, config: DtqConfig,
                                                  redis_client: redis.Redis) -> None:
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue="burst") for _ in range(4)])
    [served] = partitions(engine, "burst")
    ready = engine.keys.ready(served.tag)

    async def fetch_some(count: int, worker_id: str) -> tuple[int, list[str]]:
        worker_store = store(config, worker_id)
        try:
            fetched = await worker_store.fetch([(served, count)])
            return len(fetched.rows), fetched.drained
        finally:
            await worker_store.aclose()

    assert asyncio.run(fetch_some(2, "a")) == (2, [])
    assert redis_client.exists(ready)  # more may wait: every worker still counts it ready
    assert asyncio.run(fetch_some(5, "b")) == (2, [served.tag])
    assert not redis_client.exists(ready)  # read to its end: the next entry rings again


def test_a_paused_partition_is_drained_without_reading_it(engine: Engine, config: DtqConfig,
                                                          redis_client: redis.Redis) -> None:
    engine.tasks.enqueue("dtq.echo", queue="held")
    [served] = partitions(engine, "held")
    engine.queues.pause("held", Actor.cli())

    async def fetch_once() -> tuple[int, list[str]]:
        worker_store = store(config)
        try:
            fetched = await worker_store.fetch([(served, 10)])
            return len(fetched.rows), fetched.drained
        finally:
            await worker_store.aclose()

    assert asyncio.run(fetch_once()) == (0, [served.tag])
    stream = engine.keys.stream(served.tag, "held", "normal")
    assert redis_client.xlen(stream) == 1 and redis_client.xpending(stream, "dtq")["pending"] == 0


@pytest.mark.parametrize("ms", [0, 951_782_400_000, 951_868_799_999, 1_709_251_199_999, 1_735_689_599_999,
                                1_798_761_600_123, 4_102_444_800_000, 4_107_542_399_999])
def test_the_lua_clock_renders_times_like_python(redis_client: redis.Redis, ms: int) -> None:
    script = _expand("-- #include common\nreturn iso_ms(tonumber(ARGV[1]))")
    assert redis_client.eval(script, 0, ms) == iso(ms)


def test_server_now_is_redis_time(redis_client: redis.Redis) -> None:
    script = _expand("-- #include common\nlocal ms, text = server_now()\nreturn {ms, text}")
    before = int(time.time() * 1000)
    ms, text = redis_client.eval(script, 0)
    assert abs(int(ms) - before) < 2000 and text == iso(int(ms))
    assert datetime.fromisoformat(text).tzinfo == UTC


def test_a_worker_recreates_a_consumer_group_deleted_by_hand(engine: Engine, redis_client: redis.Redis,
                                                             start_worker) -> None:
    first = engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="fragile").id
    worker = start_worker("--queues", "fragile", "--name", "fragile-w")
    key = engine.keys.task(first)
    wait_for(lambda: redis_client.hget(key, "status") == "SUCCEEDED", message=worker.output)
    redis_client.delete(*engine.keys.streams(tag(engine, "fragile"), "fragile"))  # streams and their groups gone
    second = engine.tasks.enqueue("dtq.echo", {"n": 2}, queue="fragile").id  # XADD makes a stream with no group
    wait_for(lambda: redis_client.hget(engine.keys.task(second), "status") == "SUCCEEDED", timeout=20,
             message=worker.output)


def test_a_read_of_only_duplicates_leaves_the_partition_ready(engine: Engine, config: DtqConfig,
                                                              redis_client: redis.Redis) -> None:
    # Two stale duplicate entries ahead of a real one: a fetch of 2 absorbs both and runs nothing,
    # so the real task is still waiting; the partition stays ready.
    real = engine.tasks.enqueue("dtq.echo", queue="dups").id
    done = engine.tasks.enqueue("dtq.echo", queue="dups").id
    [served] = partitions(engine, "dups")
    redis_client.hset(engine.keys.task(done), "status", "SUCCEEDED")
    stream = engine.keys.stream(served.tag, "dups", "normal")
    redis_client.xdel(stream, redis_client.xrange(stream)[0][0])  # the real task's entry
    redis_client.xadd(stream, {"task_id": done, "attempt": "1"})  # duplicates of a finished task
    redis_client.xadd(stream, {"task_id": real, "attempt": "1"})

    async def fetch_two() -> tuple[list[str], list[str]]:
        worker_store = store(config)
        try:
            fetched = await worker_store.fetch([(served, 2)])
            return [r.task_id for r in fetched.rows], fetched.drained
        finally:
            await worker_store.aclose()

    assert asyncio.run(fetch_two()) == ([], [])  # both read entries were duplicates of the finished task
    assert redis_client.exists(engine.keys.ready(served.tag))
    assert asyncio.run(fetch_two()) == ([real], [served.tag])


def test_a_flushed_script_cache_or_a_broken_partition_does_not_stop_the_fetch(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="odd")
    engine.tasks.enqueue("dtq.echo", {"n": 2}, queue="fine")
    odd, fine = partitions(engine, "odd", "fine")
    worker_store = store(config)

    async def scenario() -> tuple[list[str], list[str], dict[str, str]]:
        try:
            # Redis restarted without its script cache and functions: the pipelined FCALL fails
            # ("Function not found"), the fetch loads the library and sends it again.
            await worker_store.client.script_flush()
            await worker_store.client.function_flush()
            first = [r.payload for r in await fetch(worker_store, [odd], 10)]
            # One partition's stream overwritten by hand: its call fails alone, the others run.
            await asyncio.to_thread(engine.tasks.enqueue, "dtq.echo", {"n": 3}, queue="odd")
            stream = engine.keys.stream(odd.tag, "odd", "normal")
            await worker_store.client.delete(stream)
            await worker_store.client.set(stream, "oops")
            fetched = await worker_store.fetch([(odd, 10), (fine, 10)])
            return first, [r.payload for r in fetched.rows], {t: type(e).__name__ for t, e in fetched.failed.items()}
        finally:
            await worker_store.aclose()

    first, second, failed = asyncio.run(scenario())
    assert first == ['{"n":1}'] and second == ['{"n":2}'] and failed == {odd.tag: "ResponseError"}


def test_a_reclaim_judged_over_a_stall_hands_entries_back_to_their_owners(config: DtqConfig,
                                                                          redis_client: redis.Redis) -> None:
    # A reclaim sent just before Redis froze runs after it thaws, when every entry looks idle;
    # the reaper then hands what it took back to the owners its task records name (a live owner's
    # next heartbeat keeps it), instead of running those tasks a second time.
    config = dataclasses.replace(config, visibility_timeout_s=0.3, heartbeat_interval_s=0.1)
    engine = Engine(config)
    task_id = engine.tasks.enqueue("dtq.echo", queue="held").id
    served = partitions(engine, "held")
    owner, peer = store(config, "owner"), store(config, "peer")
    stream = engine.keys.stream(served[0].tag, "held", "normal")

    async def scenario() -> tuple[list, list, list]:
        try:
            [row] = await fetch(owner, served, 1)
            await asyncio.sleep(0.4)  # idle past the 0.3 s visibility timeout
            handed_back = await peer.reclaim(served, 10, trusted=lambda took_s: False)
            after_give_back = redis_client.xpending_range(stream, "dtq", "-", "+", 10)
            assert redis_client.hget(engine.keys.task(task_id), "attempt") == "1"  # no attempt charged
            await asyncio.sleep(0.4)
            taken = await peer.reclaim(served, 10, trusted=lambda took_s: True)
            return [row.task_id], handed_back, [(after_give_back, taken)]
        finally:
            await owner.aclose()
            await peer.aclose()

    fetched, handed_back, [(pending_after, taken)] = asyncio.run(scenario())
    assert fetched == [task_id] and handed_back == []
    [entry] = pending_after
    assert entry["consumer"] == "owner" and entry["time_since_delivered"] < 300  # back, and fresh
    # When the owner really is gone, the next (trusted) round takes it as usual.
    assert [r.task_id for r in taken] == [task_id] and taken[0].attempt == 2


def test_a_reclaim_quarantines_a_corrupt_record_alone(config: DtqConfig, redis_client: redis.Redis) -> None:
    # It should: a silent worker's task whose errors field was corrupted by hand cannot stop the
    # reclaim of the others (the reaper would fail on the same batch every round): it is
    # dead-lettered as dtq.CorruptRecord, its entry settled, and the rest run their next attempt.
    config = dataclasses.replace(config, visibility_timeout_s=0.3, heartbeat_interval_s=0.1)
    engine = Engine(config)
    ids = [engine.tasks.enqueue("dtq.echo", queue="lost").id for _ in range(3)]
    served = partitions(engine, "lost")
    ghost, peer = store(config, "ghost"), store(config, "peer")
    stream = engine.keys.stream(served[0].tag, "lost", "normal")
    redis_client.hset(engine.keys.task(ids[1]), "errors", "[{")

    async def scenario() -> list[str]:
        try:
            assert len(await fetch(ghost, served, 10)) == 3
            await asyncio.sleep(0.4)  # idle past the 0.3 s visibility timeout: the ghost is gone
            return [r.task_id for r in await peer.reclaim(served, 10)]
        finally:
            await ghost.aclose()
            await peer.aclose()

    assert asyncio.run(scenario()) == [ids[0], ids[2]]
    assert [redis_client.hget(engine.keys.task(t), "status") for t in ids] == ["RUNNING", "DEAD_LETTERED", "RUNNING"]
    bad = engine.tasks.get(ids[1])
    assert bad["errors"][-1]["error"] == "dtq.CorruptRecord" and "not a JSON list" in bad["last_error"]
    assert redis_client.hget(engine.keys.task(ids[1]), "errors_corrupt") == "[{"
    assert [f["task_id"] for _, f in redis_client.xrange(engine.keys.dlq(served[0].tag))] == [ids[1]]
    assert [p["consumer"] for p in redis_client.xpending_range(stream, "dtq", "-", "+", 10)] == ["peer", "peer"]


def test_a_clock_given_to_the_store_is_the_claims_clock(config: DtqConfig, redis_client: redis.Redis) -> None:
    # The fetch no longer runs behind a blocking wait, so the claim's time is the worker's clock
    # (aligned to Redis's by the worker), not one read inside the script.
    engine = Engine(config)
    task_id = engine.tasks.enqueue("dtq.echo", queue="timed").id
    served = partitions(engine, "timed")
    worker_store = store(config, clock=SystemClock())

    async def scenario() -> None:
        try:
            await fetch(worker_store, served, 1)
        finally:
            await worker_store.aclose()

    before = int(time.time() * 1000)
    asyncio.run(scenario())
    started = int(redis_client.hget(engine.keys.task(task_id), "started_at"))
    assert before <= started <= int(time.time() * 1000)
