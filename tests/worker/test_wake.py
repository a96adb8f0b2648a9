"""Idle workers block on per-queue wake lists and fetch in the same round trip: every path that
adds a stream entry leaves a token, a full batch rings for the next worker, a fetch queued behind
the wait reads Redis's clock, and a stream deleted by hand gets its consumer group back."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from datetime import UTC, datetime

import pytest
import redis

from dtq_core.clock import FakeClock, SystemClock, iso
from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.scripts import _expand
from dtq_core.worker.store import WorkerStore
from tests.conftest import wait_for


def _store(config: DtqConfig, clock: object | None = None, worker_id: str = "w-wake") -> WorkerStore:
    return WorkerStore(config, async_client(config, read_timeout_s=10), clock or SystemClock(), worker_id)


def _tokens(redis_client: redis.Redis, engine: Engine, queue: str) -> int:
    return int(redis_client.llen(engine.keys.wake(queue)))


def test_submits_leave_one_wake_token_however_many_arrive(engine: Engine, redis_client: redis.Redis) -> None:
    for _ in range(5):
        engine.tasks.enqueue("dtq.echo", queue="mail")
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue="mail") for _ in range(20)])
    assert _tokens(redis_client, engine, "mail") == 1
    # A delayed task waits in the schedule: nothing to wake a worker for yet.
    engine.tasks.enqueue("dtq.echo", queue="later", delay_seconds=60)
    assert _tokens(redis_client, engine, "later") == 0


def test_the_scheduler_and_dlq_retry_ring_the_queue(engine: Engine, config: DtqConfig,
                                                     redis_client: redis.Redis) -> None:
    task_id = engine.tasks.enqueue("dtq.echo", queue="due", delay_seconds=5).id

    async def promote() -> int:
        store = _store(config, FakeClock(start_ms=engine.clock.now_ms() + 10_000), worker_id="leader")
        try:
            assert await store.acquire_or_renew_lock(False)
            return await store.promote_due()
        finally:
            await store.aclose()

    assert asyncio.run(promote()) == 1
    assert redis_client.hget(engine.keys.task(task_id), "status") == "QUEUED"
    assert _tokens(redis_client, engine, "due") == 1

    # A dead letter retried by an operator goes back to its stream and rings too.
    dead = engine.tasks.enqueue("dtq.echo", queue="dead").id
    redis_client.delete(engine.keys.wake("dead"))
    stream = engine.keys.stream("dead", "normal")
    entry = redis_client.xrange(stream)[0][0]
    dlq_id = redis_client.xadd(engine.keys.dlq(), {"task_id": dead, "queue": "dead", "type": "dtq.echo"})
    redis_client.hset(engine.keys.dlq_counts(), "dead", 1)
    redis_client.hset(engine.keys.task(dead), mapping={"status": "DEAD_LETTERED", "dlq_entry_id": dlq_id})
    redis_client.xdel(stream, entry)
    assert engine.dlq.retry(DlqSelection(ids=(dlq_id,)), Actor.cli()) == 1
    assert _tokens(redis_client, engine, "dead") == 1


def test_an_idle_wait_wakes_on_a_submit_and_claims_with_the_redis_clock(config: DtqConfig,
                                                                         redis_client: redis.Redis) -> None:
    engine = Engine(config)  # the system clock, like the API
    engine.tasks.enqueue("dtq.echo", queue="idle")  # registers the queue and its groups
    store = _store(config)
    queues = ["idle"]

    async def scenario() -> tuple[list, float]:
        try:
            assert len(await store.fetch(queues, 10)) == 1  # what was there before the wait
            assert await store.wait_and_fetch(queues, 10, 1) == []  # the stale token: empty fetch
            waiting = asyncio.create_task(store.wait_and_fetch(queues, 10, 8000))
            await asyncio.sleep(0.5)  # the fetch is queued in Redis behind the BLPOP by now
            assert not waiting.done()
            started = time.monotonic()
            await asyncio.to_thread(engine.tasks.enqueue, "dtq.echo", {"n": 2}, queue="idle")
            rows = await waiting
            return rows, time.monotonic() - started
        finally:
            await store.aclose()

    rows, woke_after = asyncio.run(scenario())
    assert [r.payload for r in rows] == ['{"n":2}']
    assert woke_after < 4  # woken by the token, far inside the 8 s wait
    task = redis_client.hgetall(engine.keys.task(rows[0].task_id))
    assert task["status"] == "RUNNING"
    # The claim ran half a second after it was queued: its time is when it ran, not when it was sent.
    assert int(task["started_at"]) >= int(task["enqueued_at"])


def test_a_wait_with_no_work_times_out_empty(config: DtqConfig) -> None:
    engine = Engine(config)
    engine.tasks.enqueue("dtq.echo", queue="quiet")
    store = _store(config)

    async def scenario() -> tuple[list, float]:
        try:
            await store.fetch(["quiet"], 10)
            await store.wait_and_fetch(["quiet"], 10, 1)
            started = time.monotonic()
            rows = await store.wait_and_fetch(["quiet"], 10, 300)
            return rows, time.monotonic() - started
        finally:
            await store.aclose()

    rows, waited = asyncio.run(scenario())
    assert rows == [] and waited >= 0.25


def test_a_full_batch_rings_for_the_next_idle_worker(engine: Engine, config: DtqConfig,
                                                     redis_client: redis.Redis) -> None:
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue="burst") for _ in range(4)])
    wake = engine.keys.wake("burst")
    redis_client.delete(wake)  # as if an idle worker had taken the submit's token

    async def fetch(count: int, worker_id: str) -> int:
        store = _store(config, worker_id=worker_id)
        try:
            return len(await store.fetch(["burst"], count))
        finally:
            await store.aclose()

    assert asyncio.run(fetch(2, "a")) == 2
    assert redis_client.llen(wake) == 1  # more may wait: wake the next one
    redis_client.delete(wake)
    assert asyncio.run(fetch(5, "b")) == 2
    assert redis_client.llen(wake) == 0  # came up short: nothing left to wake anyone for


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
    redis_client.delete(*engine.keys.streams("fragile"))  # streams and their groups gone
    second = engine.tasks.enqueue("dtq.echo", {"n": 2}, queue="fragile").id  # XADD makes a stream with no group
    wait_for(lambda: redis_client.hget(engine.keys.task(second), "status") == "SUCCEEDED", timeout=20,
             message=worker.output)


def test_a_read_of_only_duplicates_rings_for_what_is_left(engine: Engine, config: DtqConfig,
                                                          redis_client: redis.Redis) -> None:
    # Two stale duplicate entries ahead of a real one: a fetch of 2 absorbs both and runs nothing,
    # so the real task is still waiting; the wake list says so.
    real = engine.tasks.enqueue("dtq.echo", queue="dups").id
    done = engine.tasks.enqueue("dtq.echo", queue="dups").id
    redis_client.hset(engine.keys.task(done), "status", "SUCCEEDED")
    stream = engine.keys.stream("dups", "normal")
    redis_client.xdel(stream, redis_client.xrange(stream)[0][0])  # the real task's entry
    redis_client.xadd(stream, {"task_id": done, "attempt": "1"})  # duplicates of a finished task
    redis_client.xadd(stream, {"task_id": real, "attempt": "1"})
    redis_client.delete(engine.keys.wake("dups"))

    async def fetch(count: int) -> list[str]:
        store = _store(config)
        try:
            return [r.task_id for r in await store.fetch(["dups"], count)]
        finally:
            await store.aclose()

    assert asyncio.run(fetch(2)) == []  # both read entries were duplicates of the finished task
    assert redis_client.llen(engine.keys.wake("dups")) == 1
    assert asyncio.run(fetch(2)) == [real]


def test_a_flushed_script_cache_or_a_broken_wake_key_does_not_stop_the_fetch(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="odd")
    wake = engine.keys.wake("odd")
    store = _store(config)

    async def scenario() -> tuple[list[str], list[str], float]:
        try:
            # Redis restarted without its script cache: the pipelined EVALSHA fails, the fetch loads it.
            await store.client.script_flush()
            first = [r.payload for r in await store.wait_and_fetch(["odd"], 10, 1000)]
            # Someone wrote the wake key as a string: BLPOP fails at once, the fetch still runs...
            await store.client.set(wake, "oops")
            await asyncio.to_thread(engine.tasks.enqueue, "dtq.echo", {"n": 2}, queue="odd")
            second = [r.payload for r in await store.wait_and_fetch(["odd"], 10, 1000)]
            # ...and with nothing to fetch the wait still lasts its time instead of spinning.
            started = time.monotonic()
            assert await store.wait_and_fetch(["odd"], 10, 300) == []
            return first, second, time.monotonic() - started
        finally:
            await store.aclose()

    first, second, idle = asyncio.run(scenario())
    assert first == ['{"n":1}'] and second == ['{"n":2}'] and idle >= 0.25



def test_a_reclaim_judged_over_a_stall_hands_entries_back_to_their_owners(config: DtqConfig,
                                                                          redis_client: redis.Redis) -> None:
    # A reclaim sent just before Redis froze runs after it thaws, when every entry looks idle;
    # the reaper then hands what it took back to the owners its task records name (a live owner's
    # next heartbeat keeps it), instead of running those tasks a second time.
    config = dataclasses.replace(config, visibility_timeout_s=0.3, heartbeat_interval_s=0.1)
    engine = Engine(config)
    task_id = engine.tasks.enqueue("dtq.echo", queue="held").id
    owner, peer = _store(config, worker_id="owner"), _store(config, worker_id="peer")
    stream = engine.keys.stream("held", "normal")

    async def scenario() -> tuple[list, list, list]:
        try:
            [row] = await owner.fetch(["held"], 1)
            await asyncio.sleep(0.4)  # idle past the 0.3 s visibility timeout
            handed_back = await peer.reclaim([stream], 10, trusted=lambda took_s: False)
            after_give_back = redis_client.xpending_range(stream, "dtq", "-", "+", 10)
            assert redis_client.hget(engine.keys.task(task_id), "attempt") == "1"  # no attempt charged
            await asyncio.sleep(0.4)
            taken = await peer.reclaim([stream], 10, trusted=lambda took_s: True)
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
    ghost, peer = _store(config, worker_id="ghost"), _store(config, worker_id="peer")
    stream = engine.keys.stream("lost", "normal")
    redis_client.hset(engine.keys.task(ids[1]), "errors", "[{")

    async def scenario() -> list[str]:
        try:
            assert len(await ghost.fetch(["lost"], 10)) == 3
            await asyncio.sleep(0.4)  # idle past the 0.3 s visibility timeout: the ghost is gone
            return [r.task_id for r in await peer.reclaim([stream], 10)]
        finally:
            await ghost.aclose()
            await peer.aclose()

    assert asyncio.run(scenario()) == [ids[0], ids[2]]
    assert [engine.tasks.get(t)["status"] for t in ids] == ["RUNNING", "DEAD_LETTERED", "RUNNING"]
    bad = engine.tasks.get(ids[1])
    assert bad["errors"][-1]["error"] == "dtq.CorruptRecord" and "not a JSON list" in bad["last_error"]
    assert redis_client.hget(engine.keys.task(ids[1]), "errors_corrupt") == "[{"
    assert [e["task_id"] for e in engine.dlq.list().items] == [ids[1]]
    assert [p["consumer"] for p in redis_client.xpending_range(stream, "dtq", "-", "+", 10)] == ["peer", "peer"]


def test_the_lost_task_sweep_quarantines_a_corrupt_record_alone(config: DtqConfig, redis_client: redis.Redis,
                                                                caplog: pytest.LogCaptureFixture) -> None:
    # It should: the leader's sweep for RUNNING tasks whose entry vanished requeues the others
    # and quarantines the one whose errors field was corrupted by hand (logged, counted).
    engine = Engine(config)
    ids = [engine.tasks.enqueue("dtq.echo", queue="swept").id for _ in range(2)]
    stream = engine.keys.stream("swept", "normal")
    ghost = _store(config, worker_id="ghost")
    leader = _store(config, FakeClock(start_ms=engine.clock.now_ms() + 600_000), worker_id="leader")
    redis_client.hset(engine.keys.task(ids[1]), "errors", "not json")

    async def scenario() -> int:
        try:
            assert len(await ghost.fetch(["swept"], 10)) == 2
            redis_client.xtrim(stream, maxlen=0)  # the entries vanish while the ghost is gone
            assert await leader.acquire_or_renew_lock(False)
            return await leader.recover_lost_tasks()
        finally:
            await ghost.aclose()
            await leader.aclose()

    assert asyncio.run(scenario()) == 2
    assert [engine.tasks.get(t)["status"] for t in ids] == ["QUEUED", "DEAD_LETTERED"]
    assert engine.tasks.get(ids[1])["errors"][-1]["error"] == "dtq.CorruptRecord"
    assert redis_client.zcard(engine.keys.running()) == 0
    assert redis_client.hget(engine.keys.stats_counters(), "corrupt_records") == "1"
    assert f"task_id={ids[1]} worker_id=leader quarantined as dtq.CorruptRecord: the lost-task sweep" in caplog.text
