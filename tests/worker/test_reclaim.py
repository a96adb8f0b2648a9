"""The reaper's store calls on a real Redis: taking over entries idle past the visibility timeout
wherever they sit in the pending list, and entries a stopping worker hands back."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import redis

from dtq_core.clock import SystemClock
from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.keys import Keys
from dtq_core.worker.store import WorkerStore


def _store(config: DtqConfig, worker_id: str) -> WorkerStore:
    return WorkerStore(config, async_client(config, read_timeout_s=10), SystemClock(), worker_id)


def _idle_ms(redis_client: redis.Redis, stream: str, entry_id: str) -> int:
    [entry] = redis_client.xpending_range(stream, Keys.GROUP, entry_id, entry_id, 1)
    return int(entry["time_since_delivered"])


def test_an_idle_entry_behind_many_live_ones_is_taken_in_one_round(config: DtqConfig,
                                                                   redis_client: redis.Redis) -> None:
    # XAUTOCLAIM from the start of the pending list looks at only 10 x COUNT entries: with one free
    # slot, a dead worker's entry behind 60 live ones would wait for all of them to finish.
    config = dataclasses.replace(config, visibility_timeout_s=0.3, heartbeat_interval_s=0.1)
    engine = Engine(config)
    streams = engine.keys.streams("deep")
    for _ in range(60):
        engine.tasks.enqueue("dtq.echo", queue="deep")
    dead_id = engine.tasks.enqueue("dtq.echo", queue="deep").id
    live, dead, peer = (_store(config, name) for name in ("live", "dead", "peer"))

    async def scenario() -> list[tuple[str, int, str]]:
        try:
            held = await live.fetch(["deep"], 60)
            [lost] = await dead.fetch(["deep"], 10)
            assert len(held) == 60 and lost.task_id == dead_id
            deadline = time.monotonic() + 10
            while _idle_ms(redis_client, lost.stream, lost.entry_id) < 300:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)
            await live.heartbeat({}, [(r.stream, r.entry_id, r.task_id) for r in held])  # live ones: fresh
            taken = await peer.reclaim(streams, 1)
            return [(r.task_id, r.attempt, r.entry_id) for r in taken] + [("", 0, lost.entry_id)]
        finally:
            for store in (live, dead, peer):
                await store.aclose()

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
    streams = engine.keys.streams("back")
    ids = [engine.tasks.enqueue("dtq.echo", queue="back").id for _ in range(3)]
    owner, peer = _store(config, "owner"), _store(config, "peer")

    async def scenario() -> tuple[int, list[tuple[str, int]]]:
        try:
            stopped, acked, stolen = await owner.fetch(["back"], 3)
            redis_client.xack(acked.stream, Keys.GROUP, acked.entry_id)
            redis_client.xclaim(stolen.stream, Keys.GROUP, "other", 0, [stolen.entry_id], justid=True)
            released = await owner.release([stopped, acked, stolen])
            taken = await peer.reclaim(streams, 10)
            return released, [(r.task_id, r.attempt) for r in taken]
        finally:
            await owner.aclose()
            await peer.aclose()

    released, taken = asyncio.run(scenario())
    assert released == 1 and taken == [(ids[0], 2)]
    owners = {e["message_id"]: e["consumer"] for e in redis_client.xpending_range(streams[1], Keys.GROUP, "-", "+", 10)}
    assert sorted(owners.values()) == ["other", "peer"]


def test_an_idle_reclaim_round_is_one_round_trip_however_many_streams(config: DtqConfig,
                                                                      redis_client: redis.Redis) -> None:
    # Every worker runs a reaper round every min(visibility / 4, 5 s), mostly finding nothing:
    # looking at twelve streams (four queues) for idle entries is one script call.
    engine = Engine(config)
    queues = ["r1", "r2", "r3", "r4"]
    streams = [stream for queue in queues for stream in engine.keys.streams(queue)]
    engine.tasks.enqueue("dtq.echo", queue="r1")  # one live entry, not idle
    store, owner = _store(config, "idle-reaper"), _store(config, "owner")

    async def scenario() -> dict[str, int]:
        try:
            await store.ensure_queues(queues)
            assert len(await owner.fetch(queues, 10)) == 1
            assert await store.reclaim(streams, 10) == []  # warm up: script load, connection set-up
            before = redis_client.info("commandstats")
            assert await store.reclaim(streams, 10) == []
            after = redis_client.info("commandstats")
            return {name: stats["calls"] - before.get(name, {}).get("calls", 0) for name, stats in after.items()
                    if stats["calls"] != before.get(name, {}).get("calls", 0)}
        finally:
            await store.aclose()
            await owner.aclose()

    calls = asyncio.run(scenario())
    # One EVALSHA; the XPENDINGs run inside it (this Redis may serve other clients: only the
    # reaper's commands are counted).
    reaper = {name: n for name, n in calls.items()
              if name in ("cmdstat_evalsha", "cmdstat_xpending", "cmdstat_xautoclaim", "cmdstat_xclaim")}
    assert reaper == {"cmdstat_evalsha": 1, "cmdstat_xpending": len(streams)}, calls
