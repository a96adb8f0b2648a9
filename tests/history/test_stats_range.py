"""GET /api/v1/stats over a long range while no worker leads (docs/api.md: the roll-ups stand still
meanwhile): minute hashes live 25 h, so a 30-day range reads the minutes that can still exist, not
every minute of 30 days, and answers as before wherever data exists."""

from __future__ import annotations

import time
from typing import Any

import pytest
import redis
from django.test import Client

from dtq_core.engine import Engine


def _minute_ago(hours: float) -> int:
    return int(time.time() // 60 - hours * 60)


def _succeeded(range_: str, **params: Any) -> int:
    response = Client().get("/api/v1/stats", {"range": range_, **params})
    assert response.status_code == 200, response.content[:300]
    return int(response.json()["totals"]["succeeded"])


def _reads(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{name}", {}).get("calls", 0)) for name in ("hgetall", "hmget"))


@pytest.mark.single_node  # counts one server's commands
def test_a_30_day_range_without_a_leader_reads_only_minutes_that_can_exist(
        live_engine: Engine, redis_client: redis.Redis) -> None:
    live_engine.tasks.enqueue("dtq.echo", {}, queue="default")  # an install whose leader is down
    assert Client().get("/api/v1/stats").status_code == 200  # warm up
    before = _reads(redis_client)
    _succeeded("30d")
    # It should read about two days of minutes for each roll-up read (counts, depth), not 30 days
    # of them: 86,400 reads that held an API worker for seconds, for anyone (reads are open).
    assert _reads(redis_client) - before < 2 * 2 * 24 * 60 + 2 * 24 * 30 + 100


def test_minutes_no_leader_folded_still_count_in_long_ranges(live_engine: Engine,
                                                            redis_client: redis.Redis) -> None:
    tag = live_engine.registry.ensure("late").tags[0]
    k = live_engine.keys
    # A partition's minute two hours ago, and a roll-up minute of 30 h ago that a leader back from
    # an outage wrote late (it catches up a day of minutes; each then lives 25 h from the write).
    redis_client.hset(f"{k.history(tag)}m:{_minute_ago(2)}", "dtq.echo|s", 3)
    redis_client.hset(f"{k.global_history('types')}m:{_minute_ago(2)}", "dtq.echo|s", 3)
    redis_client.hset(f"{k.global_history('types')}m:{_minute_ago(30)}", "dtq.echo|s", 4)
    assert _succeeded("7d", queue="late") == _succeeded("30d", queue="late") == 3
    assert _succeeded("24h", queue="late") == 3
    assert _succeeded("7d") == _succeeded("30d") == 7
