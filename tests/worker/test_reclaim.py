"""The reaper's store calls on a real Redis: taking over entries idle past the visibility timeout
wherever they sit in the pending list, entries a stopping worker hands back, and which partitions
a round looks at."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

import pytest
import redis
from redis.asyncio.connection import AbstractConnection

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.keys import Keys

from .support import fetch, partitions, store, tag


def _idle_ms(redis_client: redis.Redis, stream: str, entry_id: str) -> int:
    [entry] = redis_client.xpending_range(stream, Keys.GROUP, entry_id, entry_id, 1)
    return int(entry["time_since_delivered"])


def test_an_idle_entry_behind_many_live_ones_is_taken_in_one_round(config: DtqConfig,
                                                                   redis_client: redis.Redis) -> None:
    # XAUTOCLAIM from the start of the pending list looks at only 10 x COUNT entries: with one free
    # slot, a dead worker's entry behind 60 live ones would wait for all of them to finish.
    config = dataclasses.replace(config, visibility_timeout_s=0.3, heartbeat_interval_s=0.1)
    engine = Engine(config)
    for _ in range(60):
        engine.tasks.enqueue("dtq.echo", queue="deep")
    dead_id = engine.tasks.enqueue("dtq.echo", queue="deep").id
    served = partitions(engine, "deep")
    streams = engine.keys.streams(tag(engine, "deep"), "deep")
    live, dead, peer = (store(config, name) for name in ("live", "dead", "peer"))

    async def scenario() -> list[tuple[str, int, str]]:
        try:
            held = await fetch(live, served, 60)
            [lost] = await fetch(dead, served, 10)
            assert len(held) == 60 and lost.task_id == dead_id
            deadline = time.monotonic() + 10
            while _idle_ms(redis_client, lost.stream, lost.entry_id) < 300:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await live.heartbeat({}, held)  # live ones: fresh
            taken = await peer.reclaim(served, 1)
            return [(r.task_id, r.attempt, r.entry_id) for r in taken] + [("", 0, lost.entry_id)]
        finally:
            for s in (live, dead, peer):
                await s.aclose()

    [(task_id, attempt, entry_id), (_, _, lost_entry)] = asyncio.run(scenario())
    assert (task_id, attempt, entry_id) == (dead_id, 2, lost_entry)
    owners = {e["consumer"] for e in redis_client.xpending_range(streams[1], Keys.GROUP, "-", "+", 100)}
    assert owners == {"live", "peer"}  # none of the live worker's entries was taken


def test_a_handed_back_entry_is_taken_at_once_and_only_if_it_was_still_ours(config: DtqConfig,
                                                                            redis_client: redis.Redis) -> None:
    # A stopping worker hands back the entries of attempts that stopped: a peer takes them at its
    # next reaper round instead of a visibility timeout (30 s here) later. One acknowledged
    # meanwhile, or taken by a peer, is not touched.
    engine = Engine(config)
    ids = [engine.tasks.enqueue("dtq.echo", queue="back").id for _ in range(3)]
    served = partitions(engine, "back")
    streams = engine.keys.streams(tag(engine, "back"), "back")
    owner, peer = store(config, "owner"), store(config, "peer")

    async def scenario() -> tuple[int, list[tuple[str, int]]]:
        try:
            stopped, acked, stolen = await fetch(owner, served, 3)
            redis_client.xack(acked.stream, Keys.GROUP, acked.entry_id)
            redis_client.xclaim(stolen.stream, Keys.GROUP, "other", 0, [stolen.entry_id], justid=True)
            released = await owner.release([stopped, acked, stolen])
            taken = await peer.reclaim(served, 10)
            return released, [(r.task_id, r.attempt) for r in taken]
        finally:
            await owner.aclose()
            await peer.aclose()

    released, taken = asyncio.run(scenario())
    assert released == 1 and taken == [(ids[0], 2)]
    owners = {e["message_id"]: e["consumer"] for e in redis_client.xpending_range(streams[1], Keys.GROUP, "-", "+", 10)}
    assert sorted(owners.values()) == ["other", "peer"]


def _count_writes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count, from now on, the writes of every asyncio connection (each is one round trip: a
    pipeline goes out in one write), as bench.rtcount does."""
    writes = [0]
    original = AbstractConnection.send_packed_command

    async def counted(self: Any, command: Any, check_health: bool = True) -> None:
        writes[0] += 1
        await original(self, command, check_health)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
    return writes


def test_an_idle_reclaim_round_is_one_round_trip_however_many_partitions(
        config: DtqConfig, redis_client: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every worker runs a reaper round every min(visibility / 4, 5 s), mostly finding nothing:
    # looking at twelve streams (four queues) for idle entries is one pipeline, and takes nothing.
    engine = Engine(config)
    queues = ["r1", "r2", "r3", "r4"]
    engine.tasks.enqueue("dtq.echo", queue="r1")  # one live entry, not idle
    served = partitions(engine, *queues)
    reaper, owner = store(config, "idle-reaper"), store(config, "owner")

    async def scenario() -> tuple[dict[str, int], int]:
        try:
            assert len(await fetch(owner, served, 10)) == 1
            assert await reaper.reclaim(served, 10) == []  # warm up: connection set-up
            writes = _count_writes(monkeypatch)
            before = redis_client.info("commandstats")
            assert await reaper.reclaim(served, 10) == []
            after = redis_client.info("commandstats")
            return {name: stats["calls"] - before.get(name, {}).get("calls", 0) for name, stats in after.items()
                    if stats["calls"] != before.get(name, {}).get("calls", 0)}, writes[0]
        finally:
            await reaper.aclose()
            await owner.aclose()

    calls, writes = asyncio.run(scenario())
    # This Redis may serve other clients: only the reaper's commands are counted.
    reaper_calls = {name: n for name, n in calls.items()
                    if name in ("cmdstat_evalsha", "cmdstat_xpending", "cmdstat_xautoclaim", "cmdstat_xclaim")}
    assert reaper_calls == {"cmdstat_xpending": 3 * len(queues)}, calls
    assert writes == 1


def test_a_round_looks_where_tasks_run_and_where_silent_workers_held_entries(config: DtqConfig,
                                                                             redis_client: redis.Redis) -> None:
    # The running index names the partitions with claimed, unacknowledged entries; a worker's
    # registration names the partitions it held entries in at its last heartbeat, which peers
    # read once it falls silent.
    engine = Engine(config)
    engine.tasks.enqueue("dtq.echo", queue="busy")
    served = partitions(engine, "busy", "quiet")
    busy, quiet = (p.tag for p in served)
    ghost, peer = store(config, "ghost"), store(config, "peer")

    async def scenario() -> tuple[list[str], set[str], set[str]]:
        try:
            rows = await fetch(ghost, served, 10)
            await ghost.heartbeat({"partitions": ",".join(sorted({r.partition_tag for r in rows}))}, rows)
            in_flight = await peer.in_flight([busy, quiet])
            fresh = await peer.silent_workers_partitions()
            redis_client.zadd(engine.keys.workers(), {"ghost": 1})  # silent since 1970
            return in_flight, fresh, await peer.silent_workers_partitions()
        finally:
            await ghost.aclose()
            await peer.aclose()

    in_flight, while_alive, once_silent = asyncio.run(scenario())
    assert in_flight == [busy]
    assert while_alive == set() and once_silent == {busy}
