"""A scrape costs a fixed number of pipelined round trips, even with 1,000 queues."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.metrics import RedisCollector

from .conftest import Scrape, parse

QUEUES = 1000


class CountingConnection(redis.Connection):
    """A real connection that counts what it sends: one send per command or per pipeline."""

    sends = 0

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        type(self).sends += 1
        super().send_packed_command(command, check_health)


def commandstats(client: redis.Redis) -> dict[str, int]:
    return {name.removeprefix("cmdstat_"): int(stats["calls"]) for name, stats in client.info("commandstats").items()}


def test_a_scrape_of_1000_queues_takes_two_round_trips(config: DtqConfig, redis_client: redis.Redis,
                                                        scrape: Callable[..., Scrape]) -> None:
    engine = Engine(config)
    names = [f"q{i:04d}" for i in range(QUEUES)]
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", {}, queue=name, priority="low") for name in names])
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", {}, queue="q0007", priority="high") for _ in range(3)])

    counting = redis.Redis.from_url(config.redis_url, decode_responses=True, connection_class=CountingConnection)
    counting.ping()  # connect first, so the count below is the scrape alone
    collector = RedisCollector(lambda: Engine(config, client=counting))
    before, CountingConnection.sends = commandstats(redis_client), 0
    started = time.monotonic()
    families = list(collector.collect())
    elapsed = time.monotonic() - started
    sends, after = CountingConnection.sends, commandstats(redis_client)

    # It should read every stream (3 per queue partition, plus the partition's DLQ) in two round
    # trips, quickly.
    assert sends == 2
    assert after["xlen"] - before.get("xlen", 0) == QUEUES * 4
    assert after["xpending"] - before.get("xpending", 0) == QUEUES * 3
    assert elapsed < 2.0
    depth = {(s.labels["queue"], s.labels["priority"]): s.value
             for f in families if f.name == "dtq_queue_depth" for s in f.samples}
    assert len(depth) == QUEUES * 3
    assert depth[("q0007", "high")] == 3 and depth[("q0007", "low")] == 1 and depth[("q0999", "low")] == 1

    # The same through /metrics: one scrape answers with all 3,000 series.
    m = scrape()
    assert m.status == 200 and len(m.samples["dtq_queue_depth"]) == QUEUES * 3
    assert m.value("dtq_queue_depth", queue="q0500", priority="low") == 1


def test_an_empty_redis_takes_one_round_trip(config: DtqConfig) -> None:
    counting = redis.Redis.from_url(config.redis_url, decode_responses=True, connection_class=CountingConnection)
    counting.ping()
    CountingConnection.sends = 0
    families = list(RedisCollector(lambda: Engine(config, client=counting)).collect())
    assert CountingConnection.sends == 1
    samples = parse_families(families)
    assert samples["dtq_redis_up"] == [({}, 1.0)] and samples["dtq_queue_depth"] == []
    assert samples["dtq_task_duration_seconds_count"] == [({}, 0.0)]


def parse_families(families: list[Any]) -> dict[str, list[tuple[dict[str, str], float]]]:
    from prometheus_client import CollectorRegistry, generate_latest

    registry = CollectorRegistry()

    class Fixed:
        def collect(self) -> list[Any]:
            return families

    registry.register(Fixed())  # type: ignore[arg-type]
    out = parse(generate_latest(registry).decode())
    out.setdefault("dtq_queue_depth", [])
    return out
