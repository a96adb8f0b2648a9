"""/metrics shows flow control per queue: dtq_queue_limit_running{queue}, dtq_queue_limit{queue,kind}
(rates in starts per second) and dtq_queue_throttled_total{queue}, with no series per group_key."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.worker import Worker
from tests.conftest import wait_for

from .conftest import Scrape


def test_limits_usage_and_throttling_are_exported_per_queue(live_engine: Engine,
                                                            scrape: Callable[..., Scrape]) -> None:
    live_engine.limits.set("mail", {"concurrency": 2, "rate": {"limit": 30, "period_s": 60},
                                    "group_concurrency": 1}, actor=Actor.cli())
    live_engine.tasks.enqueue("dtq.echo", queue="other")
    before = scrape()
    assert before.value("dtq_queue_limit", queue="mail", kind="concurrency") == 2
    assert before.value("dtq_queue_limit", queue="mail", kind="rate") == 0.5  # 30 a minute
    assert before.value("dtq_queue_limit", queue="mail", kind="group_concurrency") == 1
    assert before.value("dtq_queue_limit", queue="mail", kind="group_rate") is None  # not set: no series
    assert before.value("dtq_queue_limit", queue="other", kind="concurrency") is None
    assert before.value("dtq_queue_limit_running", queue="mail") == 0
    assert before.value("dtq_queue_throttled_total", queue="mail") == 0

    # Six 1.5 s sleeps in six groups against a worker of concurrency 6: the queue limit holds 2.
    for i in range(6):
        live_engine.tasks.enqueue("dtq.sleep", {"seconds": 1.5}, queue="mail", group_key=f"customer-{i}")
    worker = Worker(live_engine.config, queues=["mail"], concurrency=6, burst=True, name="metrics-limits")
    thread = threading.Thread(target=lambda: asyncio.run(worker.run()), daemon=True)
    thread.start()
    try:
        wait_for(lambda: scrape().value("dtq_queue_limit_running", queue="mail") == 2, timeout=15)
        during = scrape()
        assert during.value("dtq_queue_throttled_total", queue="mail") >= 1
        # Bounded labels: one series per queue, none per group_key.
        assert "customer-" not in during.text
    finally:
        thread.join(timeout=30)
    assert not thread.is_alive()
    after = scrape()
    assert after.value("dtq_queue_limit_running", queue="mail") == 0
    assert after.value("dtq_queue_throttled_total", queue="mail") >= during.value("dtq_queue_throttled_total",
                                                                                   queue="mail")
    live_engine.limits.clear("mail", actor=Actor.cli())
    assert scrape().value("dtq_queue_limit", queue="mail", kind="concurrency") is None
