"""Queue partitions under the scheduler leader: tags spread over a cluster's masters, the leader
leases every partition and runs its scripts per partition (fenced by that partition's lease),
and reconcile resizes queues to DTQ_QUEUE_PARTITIONS (raised: new partitions appended; lowered:
the dropped ones drain, then are forgotten) without losing a task."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import redis

from dtq_core.clock import FakeClock, iso
from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.errors import ErrorCode
from dtq_core.keys import TAG_RE, Keys
from dtq_core.partitions import Layout, choose_tags, slot_of
from dtq_core.worker.leader import LeaderLoop
from dtq_core.worker.reconcile import Resize, plan_resize, resized
from dtq_core.worker.store import WorkerStore

from ..conftest import WorkerProcess, wait_for

# A three-master cluster's slot map, as redis-cli --cluster create splits the 16384 slots.
RANGES = ((0, 5460, "m1"), (5461, 10922, "m2"), (10923, 16383, "m3"))


def master_of_slot(slot: int) -> str:
    return next(name for first, last, name in RANGES if first <= slot <= last)


# -- choosing tags (pure) ---------------------------------------------------------------------

def test_one_queues_partitions_spread_evenly_over_the_masters() -> None:
    tags = choose_tags("orders", 0, 6, [], master_of_slot=master_of_slot, masters=["m1", "m2", "m3"])
    assert len(set(tags)) == 6 and all(TAG_RE.fullmatch(t) for t in tags)
    assert Counter(master_of_slot(slot_of(t)) for t in tags) == {"m1": 2, "m2": 2, "m3": 2}
    # Deterministic: the same queue gets the same tags (one node, or the same slot map).
    assert choose_tags("orders", 0, 6, [], master_of_slot=master_of_slot, masters=["m1", "m2", "m3"]) == tags


def test_queues_created_one_after_another_spread_evenly_too() -> None:
    taken: list[str] = []
    for i in range(12):
        taken += choose_tags(f"q{i}", 0, 1, taken, master_of_slot=master_of_slot, masters=["m1", "m2", "m3"])
    assert Counter(master_of_slot(slot_of(t)) for t in taken) == {"m1": 4, "m2": 4, "m3": 4}


def test_partitions_added_later_go_to_the_least_loaded_masters() -> None:
    crowded = [t for t in (f"x{i}" for i in range(500)) if master_of_slot(slot_of(t)) == "m1"][:4]
    added = choose_tags("orders", 1, 4, crowded, master_of_slot=master_of_slot, masters=["m1", "m2", "m3"])
    assert Counter(master_of_slot(slot_of(t)) for t in added) == {"m2": 2, "m3": 2}
    assert not set(added) & set(crowded)


def test_on_one_node_new_tags_skip_the_taken_ones() -> None:
    first = choose_tags("orders", 0, 3, [])
    again = choose_tags("orders", 1, 2, first[:1])
    assert again == first[1:]  # partition i of a queue gets the same tag each time it is free
    assert choose_tags("orders", 1, 1, first)[0] not in first


# -- resize plans (pure) ----------------------------------------------------------------------

def test_a_resize_plan_appends_revives_or_drains() -> None:
    layout = Layout(queue="q", tags=("a",), epoch="e")
    assert plan_resize(layout, 1) is None
    plan = plan_resize(layout, 3)
    assert plan == Resize(add=2)
    assert resized(layout, plan, ("b", "c")).tags == ("a", "b", "c")
    wide = Layout(queue="q", tags=("a", "b", "c"), epoch="e")
    plan = plan_resize(wide, 1)
    assert plan == Resize(drop=("b", "c"))
    narrow = resized(wide, plan, ())
    assert (narrow.tags, narrow.draining, narrow.epoch) == (("a",), ("b", "c"), "e")
    # Raised again before they drained: the draining partitions serve again, in their order.
    plan = plan_resize(narrow, 4)
    assert plan == Resize(revive=("b", "c"), add=1)
    back = resized(narrow, plan, ("d",))
    assert (back.tags, back.draining) == (("a", "b", "c", "d"), ())


# -- Redis: a harness that drives the leader's loop directly ----------------------------------

class Leader(LeaderLoop):
    """The scheduler mixin on its own: the state LeaderLoop reads, and nothing else."""

    def __init__(self, config: DtqConfig, worker_id: str, clock: FakeClock | None = None) -> None:
        self.config, self.worker_id = config, worker_id
        self.clock = clock or FakeClock(start_ms=int(time.time() * 1000))
        self.store = WorkerStore(config, async_client(config, read_timeout_s=10), self.clock, worker_id)
        self.is_leader = False
        self._stopping = False


def run(coro: Callable[[], Coroutine[Any, Any, Any]]) -> Any:
    return asyncio.run(coro())


def partitioned(config: DtqConfig, **counts: int) -> DtqConfig:
    return dataclasses.replace(config, queue_partitions=tuple(sorted(counts.items())))


def scheduled(client: redis.Redis, keys: Keys, tag: str, queue: str, due_ms: int, *,
              status: str = "PENDING") -> str:
    """A delayed task in partition `tag`, written as enqueueTask leaves one."""
    task_id = f"{tag}-{uuid.uuid4().hex}"
    client.hset(keys.task(task_id), mapping={"status": status, "attempt": 0, "max_attempts": 3, "queue": queue,
                                              "priority": "normal", "type": "dtq.echo", "payload": "{}"})
    client.zadd(keys.schedule(tag), {task_id: due_ms})
    client.hincrby(keys.schedule_counts(tag), queue, 1)
    return task_id


def queued_entries(client: redis.Redis, keys: Keys, tag: str, queue: str) -> list[str]:
    return [fields["task_id"] for _, fields in client.xrange(keys.stream(tag, queue, "normal"))]


def test_the_leader_leases_every_partition_and_promotes_what_is_due_in_each(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    config = partitioned(config, spread=3)
    engine, keys = Engine(config), Keys(config.key_prefix)
    tags = engine.registry.ensure("spread").tags
    plain = engine.registry.ensure("plain").tags
    assert len(tags) == 3 and len(plain) == 1
    now = int(time.time() * 1000)
    due = {tag: scheduled(redis_client, keys, tag, "spread", now - 1) for tag in tags}
    later = scheduled(redis_client, keys, plain[0], "plain", now + 3_600_000)
    leader = Leader(config, "w1")
    wake = redis_client.pubsub(ignore_subscribe_messages=True)
    wake.subscribe(keys.wake())

    async def lead() -> bool:
        try:
            return await leader._lead_once()
        finally:
            await leader.store.aclose()

    assert run(lead) is True
    rang: list[str] = []
    deadline = time.monotonic() + 5
    while len(rang) < len(tags) and time.monotonic() < deadline:
        message = wake.get_message(timeout=0.2)
        if message:
            rang.append(message["data"])
    assert sorted(rang) == sorted(tags)  # each partition rang, for its workers
    wake.close()
    assert redis_client.get(keys.leader()) == "w1"
    assert {tag: redis_client.get(keys.lock(tag)) for tag in (*tags, *plain)} == dict.fromkeys((*tags, *plain), "w1")
    for tag, task_id in due.items():  # each in its own partition's stream
        assert queued_entries(redis_client, keys, tag, "spread") == [task_id]
        assert redis_client.hget(keys.task(task_id), "status") == "QUEUED"
        assert redis_client.zcard(keys.schedule(tag)) == 0 and redis_client.zcard(keys.schedule_claims(tag)) == 0
        assert redis_client.exists(keys.ready(tag))
    assert redis_client.hget(keys.task(later), "status") == "PENDING"


def test_a_lost_election_hands_the_leases_back_and_the_new_leader_takes_them(
        config: DtqConfig, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    config = partitioned(config, spread=2)
    engine, keys = Engine(config), Keys(config.key_prefix)
    tags = engine.registry.ensure("spread").tags
    first, second = Leader(config, "w1"), Leader(config, "w2")

    async def scenario() -> list[object]:
        try:
            steps: list[object] = [await first._lead_once(), await second._lead_once()]
            # w1 stalls past the election's TTL (its last renewal is now a TTL old, and the key
            # expired); w2 takes the election, but not yet the leases.
            first.store._renewed_at -= int(config.scheduler_lock_ttl_s * 1000)
            redis_client.delete(keys.leader())
            steps += [await second._lead_once(), sorted(second.store.held_leases)]
            # w1 wakes up, finds the election lost and hands its leases back; w2 takes them.
            steps += [await first._lead_once(), await second._lead_once(), sorted(second.store.held_leases)]
            await second.store.release_lock()
            return steps
        finally:
            await first.store.aclose()
            await second.store.aclose()

    assert run(scenario) == [True, False, True, [], False, True, sorted(tags)]
    assert "worker_id=w1 lost scheduler leadership" in caplog.text
    assert "worker_id=w2 took scheduler leadership" in caplog.text
    # w2 released everything on its way out.
    assert redis_client.get(keys.leader()) is None
    assert [redis_client.get(keys.lock(tag)) for tag in tags] == [None, None]


def test_stale_claims_and_lost_tasks_are_recovered_in_every_partition(
        config: DtqConfig, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    # It should: a claim a dead leader left, and a RUNNING task whose entry vanished, go back to
    # work in their own partition, whichever partition they are in; one log line sums them.
    config = partitioned(config, swept=2)
    engine, keys = Engine(config), Keys(config.key_prefix)
    tags = engine.registry.ensure("swept").tags
    now = int(time.time() * 1000)
    claimed, lost = {}, {}
    for tag in tags:
        claimed[tag] = scheduled(redis_client, keys, tag, "swept", now - 1)
        redis_client.zrem(keys.schedule(tag), claimed[tag])  # as claimDue leaves it
        redis_client.hincrby(keys.schedule_counts(tag), "swept", -1)
        redis_client.zadd(keys.schedule_claims(tag), {claimed[tag]: now - 3_600_000})
        lost[tag] = f"{tag}-{uuid.uuid4().hex}"
        redis_client.hset(keys.task(lost[tag]), mapping={
            "status": "RUNNING", "attempt": 1, "max_attempts": 3, "queue": "swept", "priority": "normal",
            "type": "dtq.echo", "payload": "{}", "errors": "[]", "entry_id": "1-1", "worker_id": "gone"})
        redis_client.zadd(keys.running(tag), {lost[tag]: now - 3_600_000})
    leader = Leader(config, "w1")

    async def scenario() -> None:
        try:
            assert await leader._lead_once()
            await leader._stale_claims_once()
            await leader._lost_tasks_once()
            assert await leader._lead_once()  # promotes the returned claims
        finally:
            await leader.store.aclose()

    run(scenario)
    assert "worker_id=w1 returned 2 stale scheduler claim(s) to the schedule" in caplog.text
    assert "worker_id=w1 requeued 2 running task(s) whose stream entry was lost" in caplog.text
    for tag in tags:
        assert sorted(queued_entries(redis_client, keys, tag, "swept")) == sorted([claimed[tag], lost[tag]])
        assert redis_client.hmget(keys.task(lost[tag]), "status", "attempt") == ["QUEUED", "1"]
        assert redis_client.zcard(keys.running(tag)) == 0 and redis_client.zcard(keys.schedule_claims(tag)) == 0
        assert int(redis_client.hget(keys.schedule_counts(tag), "swept")) == 0


def test_the_lost_task_sweep_quarantines_a_corrupt_record_alone(
        config: DtqConfig, redis_client: redis.Redis, caplog: pytest.LogCaptureFixture) -> None:
    # It should: the sweep requeues the lost task beside the corrupt one, and quarantines the one
    # whose errors field was corrupted by hand (dead-lettered, logged, counted).
    engine, keys = Engine(config), Keys(config.key_prefix)
    (tag,) = engine.registry.ensure("swept").tags
    now = int(time.time() * 1000)
    ids = [f"{tag}-{uuid.uuid4().hex}" for _ in range(2)]
    for task_id, errors in zip(ids, ["[]", "not json"], strict=True):
        redis_client.hset(keys.task(task_id), mapping={
            "status": "RUNNING", "attempt": 1, "max_attempts": 3, "queue": "swept", "priority": "normal",
            "type": "dtq.echo", "payload": "{}", "errors": errors, "entry_id": "1-1", "worker_id": "gone"})
        redis_client.zadd(keys.running(tag), {task_id: now - 3_600_000})
    leader = Leader(config, "leader")

    async def scenario() -> dict[str, int]:
        try:
            assert await leader._lead_once()
            return await leader.store.recover_lost_tasks([tag])
        finally:
            await leader.store.aclose()

    assert run(scenario) == {tag: 2}
    assert [redis_client.hget(keys.task(t), "status") for t in ids] == ["QUEUED", "DEAD_LETTERED"]
    assert redis_client.hget(keys.task(ids[1]), "last_error").startswith("dtq.CorruptRecord")
    assert redis_client.zcard(keys.running(tag)) == 0
    assert [fields["task_id"] for _, fields in redis_client.xrange(keys.dlq(tag))] == [ids[1]]
    assert redis_client.hget(keys.stats_counters(tag), "corrupt_records") == "1"
    assert f"task_id={ids[1]} worker_id=leader quarantined as dtq.CorruptRecord: the lost-task sweep" in caplog.text


def test_leader_scripts_are_fenced_by_their_own_partitions_lease(config: DtqConfig, redis_client: redis.Redis) -> None:
    # A worker that holds one partition's lease can do nothing to another partition.
    config = partitioned(config, fenced=2)
    engine, keys = Engine(config), Keys(config.key_prefix)
    mine, theirs = engine.registry.ensure("fenced").tags
    redis_client.set(keys.lock(mine), "w1")
    redis_client.set(keys.lock(theirs), "w2")
    now = int(time.time() * 1000)
    task_id = scheduled(redis_client, keys, theirs, "fenced", now - 1)
    redis_client.zadd(keys.schedule_claims(theirs), {task_id: now - 600_000})
    redis_client.zadd(keys.running(theirs), {task_id: now - 600_000})
    before = {key: redis_client.dump(key) for key in redis_client.scan_iter(f"{keys.partition(theirs)}*")}
    p = [keys.partition(theirs)]
    claim = ["dtq", "w1", now, iso(now), 60_000, 1, 100]
    assert engine.scripts("claimDue", keys=p, args=["w1", now, 10]) == ErrorCode.LEASE_LOST
    assert engine.scripts("enqueueDue", keys=p, args=["w1", now, iso(now), 60_000, 1, 100, task_id]) \
        == ErrorCode.LEASE_LOST
    assert engine.scripts("requeueStaleClaims", keys=p, args=[now, now, "w1"]) == ErrorCode.LEASE_LOST
    assert engine.scripts("recoverLostTasks", keys=p, args=[*claim, now, 10]) == ErrorCode.LEASE_LOST
    assert engine.scripts("closePartition", keys=p, args=["fenced|x", "w1", "dtq"]) == ErrorCode.LEASE_LOST
    assert {key: redis_client.dump(key) for key in redis_client.scan_iter(f"{keys.partition(theirs)}*")} == before
    # With its own lease, the same calls go through.
    assert engine.scripts("claimDue", keys=[keys.partition(mine)], args=["w1", now, 10]) == []


def test_reconcile_queue_replaces_a_layout_only_if_it_is_still_the_one_read(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, keys = Engine(config), Keys(config.key_prefix)
    layout = engine.registry.ensure("cas")
    read = redis_client.hget(keys.queues(), "cas")
    wider = dataclasses.replace(layout, tags=(*layout.tags, "zz1"))
    assert engine.scripts("reconcileQueue", keys=[keys.queues()], args=["cas", "stale", wider.to_json()]) == 0
    assert redis_client.hget(keys.queues(), "cas") == read
    assert engine.scripts("reconcileQueue", keys=[keys.queues()], args=["gone", read, wider.to_json()]) == 0
    assert not redis_client.hexists(keys.queues(), "gone")
    assert engine.scripts("reconcileQueue", keys=[keys.queues()], args=["cas", read, wider.to_json()]) == 1
    assert Layout.from_json("cas", redis_client.hget(keys.queues(), "cas")) == wider


def _layout(redis_client: redis.Redis, keys: Keys, queue: str) -> Layout:
    return Layout.from_json(queue, redis_client.hget(keys.queues(), queue))


def test_raising_a_queues_partitions_opens_them_before_publishing_them(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, keys = Engine(config), Keys(config.key_prefix)
    before = engine.registry.ensure("grow")
    pause = '{"by":"cli","at":1}'
    redis_client.set(keys.paused(before.tags[0]), pause)  # as setPaused leaves a paused queue
    leader = Leader(partitioned(config, grow=3), "w1")

    async def scenario() -> None:
        try:
            assert await leader._lead_once()
            await leader._reconcile_once()
            await leader._reconcile_once()  # nothing more to do: the layout stays
        finally:
            await leader.store.aclose()

    run(scenario)
    after = _layout(redis_client, keys, "grow")
    assert after.tags[0] == before.tags[0] and len(after.tags) == 3 and after.draining == ()
    assert after.epoch == before.epoch
    assert len(set(after.tags)) == 3  # (which tags: test_one_queues_partitions_spread_evenly_over_the_masters)
    for tag in after.tags[1:]:
        assert redis_client.get(keys.owner(tag)) == before.owner
        assert all(redis_client.xinfo_groups(stream)[0]["name"] == "dtq" for stream in keys.streams(tag, "grow"))
        assert redis_client.get(keys.paused(tag)) == pause  # a paused queue stays paused everywhere
    assert set(leader._partitions) == set(after.tags)  # leased from the next round on


def test_lowering_drains_the_dropped_partitions_and_forgets_them_once_empty(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, keys = Engine(partitioned(config, shrink=3)), Keys(config.key_prefix)
    kept, *dropped = engine.registry.ensure("shrink").tags
    a, b = dropped
    now = int(time.time() * 1000)
    # Leftovers of each kind the closing check looks at, in one partition or the other.
    redis_client.xadd(keys.stream(a, "shrink", "high"), {"task_id": "x", "attempt": 1})
    delayed = scheduled(redis_client, keys, b, "shrink", now + 3_600_000)
    # A workflow step of b that ended, its workflow not advanced yet (only a leased partition's
    # outbox is re-driven).
    redis_client.hset(keys.wf_outbox(b), "t-ended", '{"w":"x","s":0,"st":"SUCCEEDED","r":""}')
    leader = Leader(partitioned(config, shrink=1), "w1")

    def read_then_delete() -> None:  # the entry pending (delivered) but gone from the stream
        stream = keys.stream(a, "shrink", "high")
        redis_client.xreadgroup("dtq", "c1", {stream: ">"})
        redis_client.xtrim(stream, maxlen=0)
        redis_client.zrem(keys.schedule(b), delayed)
        redis_client.zadd(keys.running(b), {delayed: now})
        redis_client.xadd(keys.dlq(b), {"task_id": delayed, "queue": "shrink"})

    def settle_a() -> None:
        stream = keys.stream(a, "shrink", "high")
        pending = redis_client.xpending_range(stream, "dtq", "-", "+", 10)
        redis_client.xack(stream, "dtq", *[p["message_id"] for p in pending])

    async def scenario() -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
        seen = []
        try:
            steps = (lambda: None, lambda: None, read_then_delete, settle_a,
                     lambda: redis_client.zrem(keys.running(b), delayed), lambda: redis_client.delete(keys.dlq(b)),
                     lambda: redis_client.delete(keys.wf_outbox(b)))
            for clear in steps:
                clear()
                await leader._lead_once()
                await leader._reconcile_once()
                layout = _layout(redis_client, keys, "shrink")
                seen.append((layout.tags, layout.draining))
        finally:
            await leader.store.aclose()
        return seen

    assert run(scenario) == [
        ((kept,), (a, b)),  # dropped: draining from now on
        ((kept,), (a, b)),  # both still hold something
        ((kept,), (a, b)),  # a: an entry pending though trimmed; b: a running task, a dead letter
        ((kept,), (b,)),  # a settled: forgotten
        ((kept,), (b,)),  # b's dead letter keeps it (retry or discard it to let it go)
        ((kept,), (b,)),  # b's workflow outbox entry keeps it
        ((kept,), ()),
    ]
    assert [redis_client.get(keys.owner(tag)) is None for tag in (kept, a, b)] == [False, True, True]


def test_raising_again_before_the_dropped_partitions_drained_puts_them_back(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, keys = Engine(partitioned(config, again=3)), Keys(config.key_prefix)
    tags = engine.registry.ensure("again").tags
    for tag in tags:
        redis_client.xadd(keys.stream(tag, "again", "normal"), {"task_id": "x", "attempt": 1})

    def reconcile(count: int) -> Layout:
        leader = Leader(partitioned(config, again=count), "w1")

        async def scenario() -> None:
            try:
                await leader._lead_once()
                await leader._reconcile_once()
                await leader.store.release_lock()
            finally:
                await leader.store.aclose()

        run(scenario)
        return _layout(redis_client, keys, "again")

    assert reconcile(1).draining == tags[1:]
    layout = reconcile(3)
    assert (layout.tags, layout.draining) == (tags, ())
    assert all(redis_client.get(keys.owner(tag)) == layout.owner for tag in tags)


# -- with real workers (submit, fetch and completion of the new layout) -----------------------

FAST = {"DTQ_SCHEDULER_LOCK_TTL_S": 2, "DTQ_VISIBILITY_TIMEOUT_S": 2, "DTQ_HEARTBEAT_INTERVAL_S": 0.5}


def _statuses(client: redis.Redis, keys: Keys, ids: list[str]) -> set[str | None]:
    pipe = client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hget(keys.task(task_id), "status")
    return set(pipe.execute())


@pytest.mark.slow
def test_raising_a_queue_from_one_to_three_partitions_loses_no_queued_task(
        config: DtqConfig, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: every task queued or delayed before the raise; and submits made after it
    # spread over the three partitions.
    engine, keys = Engine(config), Keys(config.key_prefix)
    before = [engine.tasks.enqueue("dtq.echo", {"n": i}, queue="grow").id for i in range(20)]
    before += [engine.tasks.enqueue("dtq.echo", queue="grow", delay_seconds=1).id for _ in range(5)]
    (old_tag,) = engine.registry.ensure("grow").tags
    # The leader serves another queue: nothing of "grow" runs before the raise.
    leader = start_worker("--name", "lead", "--queues", "other", DTQ_QUEUE_PARTITIONS="grow=3", **FAST)
    wait_for(lambda: len(_layout(redis_client, keys, "grow").tags) == 3, timeout=30, message=leader.output)
    assert _statuses(redis_client, keys, before[:20]) == {"QUEUED"}
    engine.registry.forget_cache()
    after = [engine.tasks.enqueue("dtq.echo", {"n": i}, queue="grow").id for i in range(30)]
    layout = _layout(redis_client, keys, "grow")
    assert layout.tags[0] == old_tag
    assert Counter(task_id.split("-")[0] for task_id in after) == dict.fromkeys(layout.tags, 10)
    consumer = start_worker("--name", "eat", "--queues", "grow", DTQ_QUEUE_PARTITIONS="grow=3", **FAST)
    wait_for(lambda: _statuses(redis_client, keys, before + after) == {"SUCCEEDED"}, timeout=60,
             message=consumer.output)


@pytest.mark.slow
def test_lowering_a_queue_from_three_partitions_to_one_runs_every_task_and_forgets_the_dropped(
        config: DtqConfig, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: tasks waiting and delayed in every partition; the dropped partitions
    # leave the registry once they hold nothing.
    engine, keys = Engine(partitioned(config, shrink=3)), Keys(config.key_prefix)
    ids = [engine.tasks.enqueue("dtq.echo", {"n": i}, queue="shrink").id for i in range(30)]
    ids += [engine.tasks.enqueue("dtq.echo", queue="shrink", delay_seconds=2).id for _ in range(6)]
    tags = engine.registry.ensure("shrink").tags
    assert {task_id.split("-")[0] for task_id in ids} == set(tags)
    leader = start_worker("--name", "lead", "--queues", "other", DTQ_QUEUE_PARTITIONS="shrink=1", **FAST)
    wait_for(lambda: _layout(redis_client, keys, "shrink").draining == tags[1:], timeout=30, message=leader.output)
    consumer = start_worker("--name", "eat", "--queues", "shrink", DTQ_QUEUE_PARTITIONS="shrink=1", **FAST)
    wait_for(lambda: _statuses(redis_client, keys, ids) == {"SUCCEEDED"}, timeout=60, message=consumer.output)
    wait_for(lambda: _layout(redis_client, keys, "shrink").draining == (), timeout=30, message=leader.output)
    assert _layout(redis_client, keys, "shrink").tags == tags[:1]
    assert [redis_client.get(keys.owner(tag)) for tag in tags[1:]] == [None, None]
    engine.registry.forget_cache()
    assert engine.tasks.enqueue("dtq.echo", queue="shrink").id.split("-")[0] == tags[0]
