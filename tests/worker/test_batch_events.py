"""A batch's task events (fetchTasks, completeTasks) take their sequence numbers in one INCRBY:
every event still has its own id, and a partition's ids still count up in publish order."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections import defaultdict

import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.task import Outcome
from dtq_core.worker.executor import Completion

from .support import fetch, partitions, store


def test_a_batch_publishes_one_event_per_task_with_distinct_ascending_ids(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    config = dataclasses.replace(config, events="always")
    engine = Engine(config)
    pubsub = redis_client.pubsub()
    pubsub.subscribe(engine.keys.events())
    assert pubsub.get_message(timeout=2)["type"] == "subscribe"
    ids = [engine.tasks.enqueue("dtq.echo", {"v": i}).id for i in range(6)]

    async def run_batch() -> list[str]:
        worker_store = store(config)
        try:
            rows = await fetch(worker_store, partitions(engine, "default"), 10)
            assert sorted(r.task_id for r in rows) == sorted(ids)
            return await worker_store.complete([Completion(r, Outcome.SUCCEEDED, result_json="null") for r in rows])
        finally:
            await worker_store.aclose()

    assert asyncio.run(run_batch()) == ["SUCCEEDED"] * len(ids)
    events: list[dict[str, object]] = []
    deadline = time.monotonic() + 5
    while len(events) < 3 * len(ids) and time.monotonic() < deadline:
        message = pubsub.get_message(timeout=0.5)
        if message and message["type"] == "message":
            events.append(json.loads(message["data"]))
    pubsub.close()
    kinds = defaultdict(set)
    for e in events:
        kinds[e["type"]].add(e["task_id"])
    assert kinds == {"task.queued": set(ids), "task.started": set(ids), "task.succeeded": set(ids)}
    event_ids = [str(e["event_id"]) for e in events]
    assert len(set(event_ids)) == len(event_ids)
    seqs: dict[str, list[int]] = defaultdict(list)
    for event_id in event_ids:
        _, tag, seq = event_id.rsplit("-", 2)
        seqs[tag].append(int(seq))
    assert all(s == sorted(s) for s in seqs.values())
