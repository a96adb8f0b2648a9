"""DTQ_EVENTS: task events cost Redis nothing while nobody listens (auto), reach the console's live
feed while it is subscribed, and follow "always" and "off" (dtq_core/events.py). Real Redis, a
real worker, the real /ws/events consumer."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import pytest
import redis

import dtq_tasks  # noqa: F401  (registers dtq.echo, which the worker runs)
from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine
from dtq_core.events import CHECK_EVERY_S, EventsGate, announce
from dtq_core.keys import Keys, tag_of
from dtq_core.worker import Worker
from dtq_dashboard import fanout
from tests.dashboard.test_consumer import communicator, until


def run_burst(config: DtqConfig) -> None:
    worker = Worker(config, burst=True, name=f"gate-{time.monotonic_ns()}")
    asyncio.run(asyncio.wait_for(worker.run(), 30))


def with_events(config: DtqConfig, mode: str) -> DtqConfig:
    return DtqConfig.from_mapping({**config.as_settings(), "EVENTS": mode})


def commands(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in client.info("commandstats").items()}


def raw_events(client: redis.Redis, keys: Keys) -> Any:
    """A subscription to the events channel that does not announce itself (as a listener made
    outside dtq's own code paths)."""
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(keys.events())
    assert pubsub.get_message(timeout=1) is None  # the subscribe confirmation, skipped
    return pubsub


def drain_messages(pubsub: Any) -> list[dict[str, Any]]:
    out = []
    while (message := pubsub.get_message(timeout=0.2)) is not None:
        out.append(json.loads(message["data"]))
    return out


def test_nobody_listening_the_whole_task_path_publishes_no_event(config: DtqConfig,
                                                                   redis_client: redis.Redis) -> None:
    cfg = with_events(config, "auto")
    engine = Engine(cfg)
    pubsub = raw_events(redis_client, engine.keys)
    before = commands(redis_client)
    ids = [engine.tasks.enqueue("dtq.echo", {"n": i}).id for i in range(5)]
    run_burst(cfg)
    after = commands(redis_client)
    assert {engine.tasks.get(i)["status"] for i in ids} == {"SUCCEEDED"}
    assert drain_messages(pubsub) == []
    # No event numbered: the event sequence key was never incremented, and every PUBLISH made was
    # a wake-up of the partition (ring in common.lua), one per burst at most, not one per event.
    assert not redis_client.exists(f"{engine.keys.partition(tag_of(ids[0]))}events:seq")
    assert after.get("publish", 0) - before.get("publish", 0) <= 1
    pubsub.close()


def test_with_the_console_subscribed_its_live_feed_gets_every_task_event(live_engine: Engine) -> None:
    async def scenario() -> tuple[list[dict[str, Any]], str]:
        ws = communicator()
        assert (await ws.connect())[0]
        await until(lambda: fanout.get_hub().subscribed.is_set())  # (PUBSUB NUMSUB is per node on a cluster)
        assert live_engine.client.exists(live_engine.keys.events_listener())
        task_id = await asyncio.to_thread(lambda: live_engine.tasks.enqueue("dtq.echo", {"a": 1}).id)
        await asyncio.to_thread(run_burst, live_engine.config)
        seen: list[dict[str, Any]] = []
        while not any(e.get("type") == "task.succeeded" for e in seen):
            seen.append(json.loads(await ws.receive_from(timeout=5)))
        await ws.disconnect()
        return seen, task_id

    seen, task_id = asyncio.run(scenario())
    assert live_engine.config.events == "auto"
    assert [(e["type"], e["status"]) for e in seen if e["task_id"] == task_id] == [
        ("task.queued", "QUEUED"), ("task.started", "RUNNING"), ("task.succeeded", "SUCCEEDED")]


def test_always_publishes_without_a_listener_and_off_never_does(config: DtqConfig,
                                                                redis_client: redis.Redis) -> None:
    keys = Keys(config.key_prefix)
    for mode, expected in (("off", []), ("always", ["task.queued", "task.started", "task.succeeded"])):
        if mode == "off":
            announce(redis_client, keys)  # a listener: off ignores it
        else:
            redis_client.delete(keys.events_listener())  # nobody: always publishes all the same
        cfg = with_events(config, mode)
        engine = Engine(cfg)
        pubsub = raw_events(redis_client, engine.keys)
        task_id = engine.tasks.enqueue("dtq.echo").id
        run_burst(cfg)
        assert [e["type"] for e in drain_messages(pubsub) if e["task_id"] == task_id] == expected, mode
        pubsub.close()


def test_the_gate_reads_the_listener_key_at_most_once_a_second(config: DtqConfig,
                                                               redis_client: redis.Redis) -> None:
    keys = Keys(config.key_prefix)
    now = [100.0]
    gate = EventsGate(with_events(config, "auto"), keys, monotonic=lambda: now[0])
    reads: list[str] = []

    class Counted:
        """The real client, counting the gate's reads (INFO commandstats is per node on a cluster)."""

        def exists(self, key: str) -> int:
            reads.append(key)
            return int(redis_client.exists(key))

    client = Counted()
    assert [gate.flag(client) for _ in range(50)] == [0] * 50
    assert reads == [keys.events_listener()]
    redis_client.set(keys.events_listener(), "1", px=60_000)  # set by another process: seen at the next check
    assert gate.flag(client) == 0
    now[0] += CHECK_EVERY_S
    assert gate.flag(client) == 1 and len(reads) == 2
    redis_client.delete(keys.events_listener())
    announce(redis_client, keys)  # in this process: seen at once
    redis_client.delete(keys.events_listener())
    assert gate.flag(client) == 0 and len(reads) == 3


def test_events_must_be_auto_always_or_off(config: DtqConfig) -> None:
    with pytest.raises(ConfigError, match="DTQ_EVENTS"):
        with_events(config, "sometimes")
