"""Cluster-wide counters workers keep in Redis, as /metrics exports them."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

import dtq_tasks  # noqa: F401 - registers the built-in task types in this process
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.keys import tag_of
from dtq_core.metrics import parse_histogram, parse_tasks
from dtq_core.worker import Worker

from .conftest import Scrape


def run_burst(config: DtqConfig) -> Worker:
    worker = Worker(config, burst=True, name=f"burst-{time.monotonic_ns()}")
    asyncio.run(asyncio.wait_for(worker.run(), 30))
    return worker


def test_dlq_trims_and_absorbed_duplicates_are_counted(dtq_settings: Any, config: DtqConfig,
                                                       redis_client: redis.Redis, caplog: pytest.LogCaptureFixture,
                                                       scrape: Callable[..., Scrape]) -> None:
    cfg = DtqConfig.from_mapping({**config.as_settings(), "DLQ_MAXLEN": 1})
    engine = Engine(cfg)
    for n in range(3):
        engine.tasks.enqueue("dtq.fail", {"message": f"poison {n}"})
    echo = engine.tasks.enqueue("dtq.echo", {"x": 1}).id
    run_burst(cfg)
    # A duplicate entry for a finished task, as a scheduler split-brain would leave: absorbed, not run.
    redis_client.xadd(engine.keys.stream(tag_of(echo), "default", "normal"), {"task_id": echo, "attempt": "1"})
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="dtq.worker"):
        run_burst(cfg)
    # Logged once, with the reason.
    absorbed = [r.getMessage() for r in caplog.records if "absorbed" in r.getMessage()]
    assert absorbed == [absorbed[0]] and f"task_id={echo}" in absorbed[0]
    assert "task is SUCCEEDED at attempt 1, entry is for attempt 1" in absorbed[0]

    m = scrape()
    assert m.value("dtq_dlq_depth") == 1 and m.value("dtq_dlq_trimmed_total") == 2
    assert m.value("dtq_absorbed_duplicates_total") == 1
    assert m.value("dtq_tasks_total", queue="default", type="dtq.echo", outcome="succeeded") == 1
    assert m.value("dtq_tasks_total", queue="default", type="dtq.fail", outcome="dead_lettered") == 3


def test_every_counter_field_maps_to_its_metric(live_engine: Engine, redis_client: redis.Redis,
                                                scrape: Callable[..., Scrape]) -> None:
    # The field names are the contract between the writers (Lua, the WebSocket fanout) and /metrics.
    # Each partition's scripts count in the partition's hashes, the fanout in the global one, and
    # /metrics adds them all up.
    keys = live_engine.keys
    mail, other = (live_engine.registry.ensure(queue).tags[0] for queue in ("mail", "other"))
    redis_client.hset(keys.stats_counters(mail), mapping={"redeliveries": 1, "absorbed": 5, "fenced": 6,
                                                          "dlq_trimmed": 7, "unknown": 9})
    redis_client.hset(keys.stats_counters(other), mapping={"redeliveries": 3})
    redis_client.hset(keys.global_stats_counters(), mapping={"events_dropped": 8})
    redis_client.hset(keys.stats_tasks(mail), mapping={"mail|app.send:v2|succeeded": 2, "mail|x|y|failed": 1,
                                                       "garbage": 2})
    redis_client.hset(keys.global_stats_tasks(), mapping={"mail|app.send:v2|succeeded": 1})  # a deleted life's
    m = scrape()
    assert m.value("dtq_redeliveries_total") == 4 and m.value("dtq_absorbed_duplicates_total") == 5
    assert m.value("dtq_fenced_completions_total") == 6 and m.value("dtq_dlq_trimmed_total") == 7
    assert m.value("dtq_events_dropped_total") == 8
    assert m.value("dtq_tasks_total", queue="mail", type="app.send:v2", outcome="succeeded") == 3
    assert len(m.samples["dtq_tasks_total"]) == 2  # the malformed field is ignored


def test_histogram_buckets_become_cumulative() -> None:
    raw = {"le_0.005": "2", "le_0.1": "1", "le_1": "3", "le_300": "1", "le_inf": "4", "sum": "1234.5",
           "le_bogus": "9"}
    buckets, total = parse_histogram(raw)
    as_dict = dict(buckets)
    assert as_dict["0.005"] == 2 and as_dict["0.05"] == 2 and as_dict["0.1"] == 3 and as_dict["1"] == 6
    assert as_dict["300"] == 7 and buckets[-1] == ("+Inf", 11) and total == 1234.5
    assert [v for _, v in buckets] == sorted(v for _, v in buckets)
    assert parse_histogram({"le_1": "not a number", "sum": "-3"}) == (parse_histogram({})[0], 0.0)


def test_task_fields_split_on_the_outer_bars() -> None:
    assert parse_tasks({"q|a.b|succeeded": "2", "q|t|dead_lettered": "1.0", "|t|x": "1", "q||x": "1"}) == {
        ("q", "a.b", "succeeded"): 2.0, ("q", "t", "dead_lettered"): 1.0}
