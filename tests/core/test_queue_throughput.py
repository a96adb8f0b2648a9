"""The queues' "finished / min": the tasks finished in the last 60 s, read from the per-minute
counters completeTasks keeps, so the console's figure moves during a burst."""

from __future__ import annotations

import redis

from dtq_core.clock import FakeClock
from dtq_core.engine import Engine
from dtq_core.keys import tag_of


def _at(engine: Engine, ms: int) -> None:
    assert isinstance(engine.clock, FakeClock)
    engine.clock.advance((ms - engine.clock.now_ms()) / 1000)


def test_finished_per_minute_counts_the_last_60_seconds_not_the_last_full_minute(
        engine: Engine, redis_client: redis.Redis) -> None:
    tag = tag_of(engine.tasks.enqueue("dtq.echo", queue="burst").id)
    minute = engine.clock.now_ms() // 60000 + 1
    previous, current = engine.keys.throughput(tag, minute - 1), engine.keys.throughput(tag, minute)
    redis_client.hset(previous, "burst", 80)
    redis_client.hset(current, "burst", 10)
    _at(engine, minute * 60000 + 15000)  # 15 s into the minute: 45 s of the previous one count
    assert engine.queues.get("burst")["finished_last_minute"] == 10 + 60
    _at(engine, minute * 60000 + 59000)
    assert engine.queues.get("burst")["finished_last_minute"] == 10 + 1  # 80 * 1/60, rounded
    # A burst that started this minute shows at once (the last full minute would say 80).
    redis_client.hincrby(current, "burst", 70)
    assert engine.queues.get("burst")["finished_last_minute"] == 80 + 1


def test_an_idle_queue_finished_nothing(engine: Engine) -> None:
    engine.tasks.enqueue("dtq.echo", queue="quiet")
    assert engine.queues.get("quiet")["finished_last_minute"] == 0
