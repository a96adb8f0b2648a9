"""/metrics after real work by real worker processes: every gauge, counter and the histogram,
then a crash (redelivery, leader change, workers gone) seen through the same scrape, and the
worker's JSON log lines for those events."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dtq_core.conf import get_engine
from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .conftest import Scrape

FAST = {"DTQ_RETRY_BASE_S": "0.05", "DTQ_RETRY_MAX_S": "0.1", "DTQ_VISIBILITY_TIMEOUT_S": "2",
        "DTQ_HEARTBEAT_INTERVAL_S": "0.5", "DTQ_SCHEDULER_LOCK_TTL_S": "1", "DTQ_LOG_FORMAT": "json"}


def status(engine: Engine, task_id: str) -> str:
    return str(engine.tasks.get(task_id)["status"])


def json_lines(worker: WorkerProcess) -> list[dict[str, Any]]:
    # Every log line is one JSON object when DTQ_LOG_FORMAT=json (Django's system-check report,
    # printed before logging starts, is plain text and is left out here).
    return [json.loads(line) for line in worker.output().splitlines() if line.startswith("{")]


def test_metrics_show_real_work_and_a_crash(dtq_settings: Any, live_engine: Engine,
                                            start_worker: Callable[..., WorkerProcess],
                                            scrape: Callable[..., Scrape]) -> None:
    # The API judges liveness with the same visibility timeout as the workers.
    dtq_settings.DTQ = {**dtq_settings.DTQ, "VISIBILITY_TIMEOUT_S": 2, "HEARTBEAT_INTERVAL_S": 0.5}
    engine = get_engine()
    for priority in ("high", "high", "low"):
        engine.tasks.enqueue("dtq.echo", {}, queue="backlog", priority=priority)  # no worker serves "backlog"
    delayed = engine.tasks.enqueue("dtq.echo", {}, delay_seconds=3600).id
    echoes = [engine.tasks.enqueue("dtq.echo", {"n": n}).id for n in range(2)]
    poison = engine.tasks.enqueue("dtq.fail", {"retryable": False, "message": "bad input"}).id
    flaky = engine.tasks.enqueue("dtq.flaky", {"fail_times": 1}, max_attempts=3).id
    slow = engine.tasks.enqueue("dtq.sleep", {"seconds": 60}, queue="slow").id
    last_try = engine.tasks.enqueue("dtq.sleep", {"seconds": 60}, queue="slow", max_attempts=1).id

    w1 = start_worker("--queues", "default,slow", "--name", "obs-w1", **FAST)
    wait_for(lambda: all(status(engine, t) == "SUCCEEDED" for t in [*echoes, flaky])
             and status(engine, poison) == "DEAD_LETTERED" and status(engine, slow) == "RUNNING"
             and status(engine, last_try) == "RUNNING",
             timeout=30, message="the worker did not finish the tasks")
    wait_for(lambda: scrape().value("dtq_scheduler_leader") == 1 and scrape().value("dtq_retry_scheduled") == 1)
    # The run-time histogram is written by the worker about once a second (worker/samples.py).
    wait_for(lambda: scrape().value("dtq_task_duration_seconds_count") == 5,
             message="the worker did not write its run-time samples")

    m = scrape()
    assert m.status == 200 and m.value("dtq_redis_up") == 1
    # Gauges read from the streams, the schedule, the DLQ, the registry and the lock.
    assert m.value("dtq_queue_depth", queue="backlog", priority="high") == 2
    assert m.value("dtq_queue_depth", queue="backlog", priority="normal") == 0
    assert m.value("dtq_queue_depth", queue="backlog", priority="low") == 1
    assert m.value("dtq_queue_depth", queue="default", priority="normal") == 0
    assert m.value("dtq_queue_pending", queue="slow") == 2
    assert m.value("dtq_queue_pending", queue="backlog") == 0
    assert m.value("dtq_queue_depth_limit") == engine.config.max_queue_depth
    assert m.value("dtq_retry_scheduled") == 1  # the delayed task; the flaky retry has run
    assert m.value("dtq_dlq_depth") == 1
    assert m.value("dtq_workers_alive") == 1
    assert m.value("dtq_scheduler_leader") == 1
    assert m.value("dtq_scheduler_leader_info", worker_id="obs-w1") == 1
    # Worker-side counters, kept in Redis by the completion script.
    assert m.value("dtq_tasks_total", queue="default", type="dtq.echo", outcome="succeeded") == 2
    assert m.value("dtq_tasks_total", queue="default", type="dtq.fail", outcome="dead_lettered") == 1
    assert m.value("dtq_tasks_total", queue="default", type="dtq.flaky", outcome="retrying") == 1
    assert m.value("dtq_tasks_total", queue="default", type="dtq.flaky", outcome="succeeded") == 1
    # The histogram is cumulative: buckets never decrease and +Inf equals the count of attempts.
    buckets = [(float(lbls["le"]), v) for lbls, v in m.samples["dtq_task_duration_seconds_bucket"]]
    assert [v for _, v in sorted(buckets)] == sorted(v for _, v in buckets)
    assert m.value("dtq_task_duration_seconds_bucket", le="+Inf") == 5 == m.value("dtq_task_duration_seconds_count")
    assert m.value("dtq_task_duration_seconds_bucket", le="2.5") == 5  # echo, fail and flaky are instant
    assert 0 <= (m.value("dtq_task_duration_seconds_sum") or 0) < 12.5
    for name in ("dtq_redeliveries_total", "dtq_absorbed_duplicates_total", "dtq_fenced_completions_total",
                 "dtq_dlq_trimmed_total", "dtq_events_dropped_total"):
        assert m.value(name) == 0, name
    assert delayed and m.value("django_http_requests_total_by_method_total", method="GET") is not None

    # The DLQ move is logged once, as JSON with the correlation fields and the reason.
    moves = [line for line in json_lines(w1) if "moved to the DLQ" in line["message"]]
    assert len(moves) == 1
    assert moves[0]["task_id"] == poison and moves[0]["queue"] == "default" and moves[0]["attempt"] == 1
    assert moves[0]["worker_id"] == "obs-w1" and "bad input" in moves[0]["message"]
    assert moves[0]["level"] == "WARNING" and "request_id" in moves[0]

    # A crash: the only worker goes, then a peer reclaims the running task and takes the lead.
    w1.kill()
    wait_for(lambda: scrape().value("dtq_workers_alive") == 0, timeout=10, message="dead worker still counted")
    w2 = start_worker("--queues", "slow", "--name", "obs-w2", **FAST)
    # Deadlines, not sleeps: generous, as a loaded CI machine can take seconds to start a worker.
    wait_for(lambda: scrape().value("dtq_redeliveries_total") == 2, timeout=30,
             message=lambda: f"redeliveries: {scrape().value('dtq_redeliveries_total')}; obs-w2:\n{w2.output()}")
    wait_for(lambda: scrape().value("dtq_scheduler_leader_info", worker_id="obs-w2") == 1, timeout=20,
             message=lambda: w2.output())
    m = scrape()
    assert m.value("dtq_workers_alive") == 1 and m.value("dtq_queue_pending", queue="slow") == 1
    assert m.value("dtq_dlq_depth") == 2 and status(engine, last_try) == "DEAD_LETTERED"
    assert m.value("dtq_scheduler_leader_info", worker_id="obs-w1") is None

    lines = json_lines(w2)
    reclaims = [line for line in lines if "reclaimed" in line["message"]]
    assert len(reclaims) == 1
    assert reclaims[0]["task_id"] == slow and reclaims[0]["attempt"] == 2 and reclaims[0]["worker_id"] == "obs-w2"
    # The task out of attempts is dead-lettered by the claim script; the worker logs it once.
    lost = [line for line in lines if "moved to the DLQ" in line["message"]]
    assert len(lost) == 1 and lost[0]["task_id"] == last_try and "dtq.WorkerLost" in lost[0]["message"]
    assert [line for line in lines if "took scheduler leadership" in line["message"]]
    assert all(line["worker_id"] == "obs-w2" for line in lines if "worker_id=" in line["message"])
