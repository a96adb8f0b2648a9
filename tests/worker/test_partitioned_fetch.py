"""A worker serving partitioned queues: the free slots are shared fairly among the ready
partitions (none starves), each partition serves high before normal before low, one fetch round
is one write whatever the number of partitions, and completions go to each task's partition."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from typing import Any

import pytest
import redis
from redis.asyncio.connection import AbstractConnection

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.keys import tag_of
from dtq_core.scripts import load
from dtq_core.wire import pack
from dtq_core.worker.fairness import share

from .support import partitions, store
from .test_worker_behaviour import run_burst


@pytest.mark.parametrize(("total", "tags", "offset", "expected"), [
    (10, ["a", "b"], 0, [("a", 5), ("b", 5)]),
    (10, ["a", "b", "c"], 0, [("a", 4), ("b", 3), ("c", 3)]),
    (10, ["a", "b", "c"], 1, [("a", 3), ("b", 4), ("c", 3)]),
    (10, ["a", "b", "c"], 5, [("a", 3), ("b", 3), ("c", 4)]),
    (2, ["a", "b", "c", "d"], 0, [("a", 1), ("b", 1)]),
    (2, ["a", "b", "c", "d"], 3, [("a", 1), ("d", 1)]),
    (0, ["a"], 0, []),
    (3, [], 0, []),
])
def test_free_slots_are_shared_evenly_and_the_remainder_rotates(total: int, tags: list[str], offset: int,
                                                                 expected: list[tuple[str, int]]) -> None:
    assert share(total, tags, offset) == expected


def test_with_fewer_slots_than_partitions_every_partition_gets_its_turn() -> None:
    tags = [f"t{i}" for i in range(7)]
    turns: Counter[str] = Counter()
    offset = 0
    for _ in range(7):
        for tag, n in share(3, tags, offset):
            turns[tag] += n
        offset += 3 % len(tags)
    assert turns == dict.fromkeys(tags, 3)


def _partitioned(config: DtqConfig, **queues: int) -> DtqConfig:
    return dataclasses.replace(config, queue_partitions=tuple(sorted(queues.items())))


@pytest.mark.single_node
def test_one_fetch_round_asks_every_partition_in_one_write_high_before_low_in_each(
        config: DtqConfig, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    config = _partitioned(config, spread=3)
    engine = Engine(config)
    served = partitions(engine, "spread")
    assert len(served) == 3
    for priority in ("low", "normal", "high"):
        engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", {"p": priority}, queue="spread",
                                                         priority=priority) for _ in range(6)])
    # What each partition holds, by priority: what a fetch of 2 from each must take.
    waiting = {p.tag: [pr for pr in ("high", "normal", "low")
                       for _ in range(redis_client.xlen(engine.keys.stream(p.tag, "spread", pr)))] for p in served}
    worker_store = store(config)
    writes = [0]
    original = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        writes[0] += 1
        await original(self, command, check_health)

    async def scenario() -> list[Any]:
        try:
            # Neither the fetch line's connection set-up (HELLO, CLIENT SETINFO) nor a script load
            # (NOSCRIPT on a fresh Redis) is counted, nor the events gate's read of the listener key
            # (at most once a second, dtq_core/events.py).
            await worker_store.fetch_path.lines.exchange([("", pack(["PING"]))], 5)
            await load(worker_store.client, "fetchTasks")
            await worker_store.events.aflag(worker_store.client)
            monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
            return (await worker_store.fetch([(p, 2) for p in served])).rows
        finally:
            await worker_store.aclose()

    rows = asyncio.run(scenario())
    assert writes[0] == 1  # three partitions, one round trip
    for row in rows:
        assert row.tag == tag_of(row.task_id)
    for p in served:  # within each partition, high before normal before low
        assert [r.priority for r in rows if r.tag == p.tag] == waiting[p.tag][:2]


def test_a_worker_drains_every_partition_and_records_each_in_its_own(config: DtqConfig,
                                                                     redis_client: redis.Redis) -> None:
    config = _partitioned(config, spread=4)
    engine = Engine(config)
    ids = [engine.tasks.enqueue("dtq.echo", {"n": n}, queue="spread").id for n in range(40)]
    served = partitions(engine, "spread")
    assert {tag_of(t) for t in ids} == {p.tag for p in served}  # submits spread over them
    run_burst(config, concurrency=3)
    assert {engine.tasks.get(t)["status"] for t in ids} == {"SUCCEEDED"}
    for p in served:
        mine = [t for t in ids if tag_of(t) == p.tag]
        assert redis_client.hget(engine.keys.stats_tasks(p.tag), "spread|dtq.echo|succeeded") == str(len(mine))
        assert redis_client.zcard(engine.keys.running(p.tag)) == 0
        assert not redis_client.exists(engine.keys.ready(p.tag))  # drained, so the flag is down


def test_a_busy_partition_does_not_starve_the_others(config: DtqConfig, redis_client: redis.Redis) -> None:
    # It should: with one slot and a backlog in one queue, a task submitted to another queue
    # runs within a few fetch rounds, not after the backlog.
    engine = Engine(config)
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.sleep", {"seconds": 0.02}, queue="backlog")
                               for _ in range(100)])
    late = engine.tasks.enqueue("dtq.echo", queue="other").id
    started = time.monotonic()
    run_burst(config, concurrency=1, max_tasks=10)
    assert engine.tasks.get(late)["status"] == "SUCCEEDED", time.monotonic() - started


def test_a_fetch_of_thousands_claims_them_all_into_the_running_index(config: DtqConfig,
                                                                    redis_client: redis.Redis) -> None:
    # fetchTasks adds its claims to the running index in one ZADD, in chunks past 1,000 claims
    # (Lua's unpack takes at most 8,000 values).
    engine = Engine(dataclasses.replace(config, max_queue_depth=0))
    subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="big") for i in range(4100)]  # 8,200 values
    replies = engine.tasks.enqueue_many(subs)
    assert not any(isinstance(r, Exception) for r in replies)
    (partition,) = partitions(engine, "big")
    worker_store = store(config)

    async def fetch() -> int:
        try:
            return len((await worker_store.fetch([(partition, 4100)])).rows)
        finally:
            await worker_store.aclose()

    assert asyncio.run(fetch()) == 4100
    running = redis_client.zrange(engine.keys.running(partition.tag), 0, -1)
    assert sorted(running) == sorted(r.id for r in replies)
