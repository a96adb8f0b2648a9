"""Task history (issue 24): what real workers count per queue and type, what the leader rolls up
and folds, and what GET /api/v1/stats returns of it."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.history import bucket_bounds, bucket_of, percentile
from dtq_core.worker.history import HOUR_GRACE_MIN, HistoryRoller
from dtq_core.worker.store import WorkerStore

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST
from ..worker.support import store as worker_store
from ..worker.support import tag

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.history.handlers"}


def _stats(api: APIClient, **params: Any) -> dict[str, Any]:
    response = api.get("/api/v1/stats", params)
    assert response.status_code == 200, response.content
    return response.json()


def _minute_fields(client: redis.Redis, engine: Engine, queue: str) -> dict[str, int]:
    """Every count of the queue's partition history, summed over its minute hashes."""
    total: dict[str, int] = {}
    for key in client.scan_iter(match=f"{engine.keys.history(tag(engine, queue))}m:*"):
        for name, n in client.hgetall(key).items():
            total[name] = total.get(name, 0) + int(n)
    return total


def test_a_worker_s_outcomes_and_times_reach_the_queue_type_and_global_series(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    engine.queues.pause("parked", _actor())
    for _ in range(7):
        engine.tasks.enqueue("hist.sleep", queue="parked")
    for _ in range(20):
        engine.tasks.enqueue("hist.sleep", {"ms": 30}, queue="hq")
    for _ in range(3):
        engine.tasks.enqueue("hist.fail", queue="hq", max_attempts=2)
    for _ in range(2):
        engine.tasks.cancel(engine.tasks.enqueue("hist.sleep", queue="hq", delay_seconds=600).id, _actor())
    worker = start_worker("--name", "h", "--queues", "hq,parked", **ENV)

    want = {"succeeded": 20, "retried": 3, "dead_lettered": 3, "cancelled": 2, "failed": 0, "expired": 0}
    wait_for(lambda: all(_stats(api, queue="hq")["totals"][k] == n for k, n in want.items()), timeout=30,
             message=lambda: f"{_stats(api, queue='hq')['totals']}\n{worker.output()}")
    body = _stats(api, queue="hq")
    assert body["range"] == "1h" and body["step_s"] == 60 and len(body["series"]["time"]) == 60
    assert sum(body["series"]["succeeded"]) == 20 and sum(body["series"]["dead_lettered"]) == 3
    totals = body["totals"]
    # 30 ms handlers: the estimate lies within the bucket around 30 ms (22.6-32 ms, +- scheduling).
    assert 20 <= totals["run_ms"]["p50"] <= 50, totals
    assert totals["wait_ms"]["p50"] is not None and totals["wait_ms"]["p50"] >= 0
    assert totals["error_rate"] == pytest.approx(3 / 25, abs=1e-3)
    rows = {row["type"]: row for row in body["types"]}
    assert rows["hist.sleep"]["succeeded"] == 20 and rows["hist.sleep"]["cancelled"] == 2
    assert rows["hist.fail"]["dead_lettered"] == 3 and rows["hist.fail"]["error_rate"] == 1.0
    assert body["types"][0]["type"] == "hist.sleep"  # the slowest first

    one_type = _stats(api, queue="hq", type="hist.fail")["totals"]
    assert (one_type["succeeded"], one_type["retried"], one_type["dead_lettered"]) == (0, 3, 3)

    # The leader (this worker) rolls the partitions up for the all-queues and per-type series.
    wait_for(lambda: _stats(api)["totals"]["succeeded"] == 20, timeout=20, message=worker.output)
    everything = _stats(api, range="24h")
    assert everything["step_s"] == 300 and len(everything["series"]["time"]) == 288
    assert everything["totals"]["dead_lettered"] == 3
    assert _stats(api, type="hist.fail")["totals"]["retried"] == 3
    # The parked queue's 7 waiting tasks were sampled as its depth.
    depth = [d for d in _stats(api, queue="parked")["series"]["depth"] if d is not None]
    assert depth and depth[-1] == 7, depth


def test_a_task_whose_worker_was_sigkilled_is_counted_once(
        live_engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    task_id = engine.tasks.enqueue("hist.die_once", queue="crash").id
    first = start_worker("--name", "first", "--queues", "crash", **ENV)
    wait_for(lambda: first.proc.poll() is not None, timeout=20, message=first.output)  # it killed itself
    second = start_worker("--name", "second", "--queues", "crash", **ENV)
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=30, message=second.output)
    # The worker writes its history samples about once a second (dtq_core/worker/samples.py).
    wait_for(lambda: _stats(api, queue="crash")["totals"]["succeeded"] > 0, timeout=10, message=second.output)
    totals = _stats(api, queue="crash")["totals"]
    assert (totals["succeeded"], totals["retried"], totals["dead_lettered"], totals["failed"]) == (1, 0, 0, 0)
    counts = _minute_fields(redis_client, engine, "crash")
    assert counts.get("hist.die_once|s") == 1
    # One run time and one wait time: the attempt that never finished left no sample.
    assert sum(n for name, n in counts.items() if "|r" in name and name[-1].isdigit()) == 1
    assert sum(n for name, n in counts.items() if "|w" in name) == 1


def _roll(engine: Engine, now_s: float) -> None:
    async def run() -> None:
        s: WorkerStore = worker_store(engine.config)
        layouts = {name: layout.all_tags for name, layout in engine.registry.layouts(fresh=True).items()}
        await HistoryRoller(s).run_once(layouts, int(now_s * 1000))
        await s.client.aclose()
    asyncio.run(run())


def test_the_leader_folds_complete_hours_and_long_ranges_read_them(
        live_engine: Engine, redis_client: redis.Redis) -> None:
    engine, api = live_engine, APIClient()
    now = time.time()
    hour = int(now // 3600) - 3  # three hours ago: a complete hour
    t = tag(engine, "old")
    for minute, n in ((hour * 60 + 5, 4), (hour * 60 + 59, 6)):
        redis_client.hset(f"{engine.keys.history(t)}m:{minute}", mapping={"job|s": n, "job|r12": n, "job|f": 1})
    # A leader that had folded up to four hours ago finds the hour left, and folds it.
    redis_client.hset(engine.keys.history_folded(), mapping={f"hour:{t}": hour - 1})
    _roll(engine, now)
    folded = redis_client.hgetall(f"{engine.keys.history(t)}h:{hour}")
    assert folded == {"job|s": "10", "job|r12": "10", "job|f": "2"}
    assert 0 < redis_client.pttl(f"{engine.keys.history(t)}h:{hour}") <= 31 * 86400 * 1000
    # Up to the last hour that ended HOUR_GRACE_MIN ago: in the first minutes of an hour, the one before last.
    last_complete = (int(now * 1000) // 60000 - HOUR_GRACE_MIN) // 60 - 1
    assert int(redis_client.hget(engine.keys.history_folded(), f"hour:{t}")) == last_complete
    # Folding again (a second leader, a retry) gives the same hash.
    redis_client.hset(engine.keys.history_folded(), mapping={f"hour:{t}": hour - 1})
    _roll(engine, now)
    assert redis_client.hgetall(f"{engine.keys.history(t)}h:{hour}") == folded

    body = _stats(api, queue="old", range="7d")
    assert body["step_s"] == 3600 and len(body["series"]["time"]) == 168
    assert body["totals"]["succeeded"] == 10 and body["totals"]["failed"] == 2
    lo, hi = bucket_bounds(12)
    assert lo <= body["totals"]["run_ms"]["p50"] <= hi
    assert _stats(api, queue="old", range="30d", step=3600)["totals"]["succeeded"] == 10
    assert len(_stats(api, queue="old", range="30d")["series"]["time"]) == 30
    # The global roll-up of those minutes (a pass catching up on minutes no leader rolled).
    assert _stats(api, range="24h")["totals"]["succeeded"] in (0, 10)


def test_days_fold_from_hours_and_the_30_day_range_reads_them(live_engine: Engine, redis_client: redis.Redis
                                                               ) -> None:
    engine, api = live_engine, APIClient()
    now = time.time()
    day = int(now // 86400) - 2
    t = tag(engine, "days")
    for hour in range(day * 24, day * 24 + 24):
        redis_client.hset(f"{engine.keys.history(t)}h:{hour}", mapping={"job|s": 2, "job|d": 1})
    redis_client.hset(engine.keys.history_folded(), mapping={f"hour:{t}": int(now // 3600) - 1, f"day:{t}": day - 1})
    _roll(engine, now)
    assert redis_client.hgetall(f"{engine.keys.history(t)}d:{day}") == {"job|s": "48", "job|d": "24"}
    assert int(redis_client.hget(engine.keys.history_folded(), f"day:{t}")) == int(now // 86400) - 1
    # The hours are gone (as after their 31 days): the 30-day range reads the day.
    for hour in range(day * 24, day * 24 + 24):
        redis_client.delete(f"{engine.keys.history(t)}h:{hour}")
    body = _stats(api, queue="days", range="30d")
    assert body["step_s"] == 86400 and (body["totals"]["succeeded"], body["totals"]["dead_lettered"]) == (48, 24)
    assert body["series"]["succeeded"][-3] == 48  # the day before yesterday, of the 30 days ending today
    rows = {r["type"]: r for r in APIClient().get("/api/v1/stats", {"queue": "days", "range": "30d"}).json()["types"]}
    assert rows["job"]["dead_lettered"] == 24


def test_the_global_roll_up_catches_up_on_minutes_no_leader_rolled(
        live_engine: Engine, redis_client: redis.Redis) -> None:
    engine, api = live_engine, APIClient()
    now = time.time()
    minute = int(now // 60)
    t = tag(engine, "gap")
    redis_client.hset(f"{engine.keys.history(t)}m:{minute - 30}", mapping={"a|s": 5, "a|d": 1})
    redis_client.hset(engine.keys.history_folded(), "minute", minute - 45)  # the last leader stopped here
    _roll(engine, now)
    body = _stats(api)
    assert (body["totals"]["succeeded"], body["totals"]["dead_lettered"]) == (5, 1)
    assert _stats(api, type="a")["totals"]["succeeded"] == 5
    assert int(redis_client.hget(engine.keys.history_folded(), "minute")) == minute - 3


def test_a_partition_keeps_a_bounded_number_of_type_series(live_engine: Engine, redis_client: redis.Redis) -> None:
    """Past 100 types a queue counts the others as "(other)" (the script's own cap)."""
    engine, api = live_engine, APIClient()
    t = tag(engine, "many")
    for i in range(105):
        engine.tasks.cancel(engine.tasks.enqueue(f"t{i}", queue="many", delay_seconds=600).id, _actor())
    assert redis_client.scard(engine.keys.history_types(t)) == 100
    rows = {row["type"]: row["cancelled"] for row in _stats(api, queue="many")["types"]}
    assert rows["(other)"] == 5 and len(rows) == 101
    assert _stats(api, queue="many", type="(other)")["totals"]["cancelled"] == 5


def test_deleting_a_queue_deletes_its_history(live_engine: Engine, redis_client: redis.Redis,
                                              start_worker: Callable[..., WorkerProcess]) -> None:
    engine, api = live_engine, APIClient()
    task_id = engine.tasks.enqueue("hist.sleep", queue="gone").id
    worker = start_worker("--name", "g", "--queues", "gone", **ENV)
    wait_for(lambda: engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
    t = tag(engine, "gone")
    wait_for(lambda: list(redis_client.scan_iter(match=f"{engine.keys.history(t)}m:*")), timeout=10,
             message=worker.output)
    # Folded hours and days, as the leader leaves them over 30 days.
    now = time.time()
    redis_client.hset(f"{engine.keys.history(t)}h:{int(now // 3600) - 200}", "hist.sleep|s", 3)
    redis_client.hset(f"{engine.keys.history(t)}d:{int(now // 86400) - 29}", "hist.sleep|s", 30)
    worker.kill()
    engine.queues.delete("gone", _actor())
    assert list(redis_client.scan_iter(match=f"{engine.keys.history(t)}*")) == []
    assert api.get("/api/v1/stats", {"queue": "gone"}).status_code == 404


@pytest.mark.parametrize(("params", "field"), [
    ({"range": "2h"}, "range"), ({"range": "x" * 5000}, "range"), ({"step": "abc"}, "step"),
    ({"step": "7"}, "step"), ({"range": "24h", "step": "30"}, "step"), ({"step": "1" * 30}, "step"),
    ({"queue": "Bad Name"}, "queue"), ({"type": "no spaces"}, "type"), ({"type": "a|b"}, "type"),
    ({"step": "\u00b2"}, "step"), ({"step": "\u0663"}, "step"),  # a superscript two, an Arabic-Indic three
])
def test_bad_parameters_are_a_400_naming_the_field(live_engine: Engine, params: dict[str, str], field: str) -> None:
    response = APIClient().get("/api/v1/stats", params)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "VALIDATION_ERROR"
    assert response.json()["error"]["field"] == field


def test_an_unknown_queue_is_a_404(live_engine: Engine) -> None:
    response = APIClient().get("/api/v1/stats", {"queue": "never"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "QUEUE_NOT_FOUND"


def test_stats_answer_503_when_redis_is_down() -> None:
    response = APIClient().get("/api/v1/stats")
    assert response.status_code == 503 and response.json()["error"]["code"] == "REDIS_UNAVAILABLE"


def test_percentiles_from_buckets_lie_in_the_right_bucket() -> None:
    samples = [1.5] * 50 + [30.0] * 45 + [900.0] * 5
    buckets: dict[int, int] = {}
    for ms in samples:
        buckets[bucket_of(ms)] = buckets.get(bucket_of(ms), 0) + 1
    for q, value in ((50, 1.5), (95, 30.0), (99, 900.0)):
        lo, hi = bucket_bounds(bucket_of(value))
        estimate = percentile(buckets, q)
        assert estimate is not None and lo <= estimate <= hi, (q, estimate, lo, hi)
    assert percentile({}, 50) is None
    assert bucket_of(0.2) == 0 and bucket_of(1) == 1 and bucket_of(10**12) == 60


def _actor() -> Any:
    from dtq_core.engine.audit import Actor

    return Actor(name="cli:test", source="cli")



def test_purged_tasks_count_as_cancelled_in_the_history(live_engine: Engine, anonymous_admin: Any) -> None:
    api = APIClient()
    for i in range(3):
        live_engine.tasks.enqueue("dtq.noop", {"i": i}, queue="purge-hist")
    one = live_engine.tasks.enqueue("dtq.noop", {"i": 9}, queue="purge-hist").id
    assert api.post(f"/api/v1/tasks/{one}/cancel").status_code in (200, 202)
    assert api.post("/api/v1/queues/purge-hist/purge").json()["count"] == 3
    statuses = [t["status"] for t in api.get("/api/v1/tasks", {"queue": "purge-hist"}).json()["results"]]
    assert statuses.count("CANCELLED") == 4
    totals = api.get("/api/v1/stats", {"range": "1h", "queue": "purge-hist"}).json()["totals"]
    assert totals["cancelled"] == 4, totals  # the purge's 3 with the cancel's 1, as the task list says


def test_samples_a_worker_writes_late_reach_the_overview_and_the_hours_already_folded(
        live_engine: Engine, redis_client: redis.Redis) -> None:
    # A worker keeps its samples while Redis cannot be reached (worker/samples.py) and writes
    # them when it can: into minutes the leader's roll-up stopped recomputing, of an hour it
    # folded already. The overview and the long ranges must count them all the same.
    engine, api = live_engine, APIClient()
    t = engine.registry.ensure("late").tags[0]
    _roll(engine, time.time())  # a leader ran: every scope's hours are folded up to now
    now_minute = int(time.time() // 60)
    late_minute, recent_minute = now_minute - 180, now_minute  # three hours ago: a folded hour
    late_reply = json.dumps({"h": {"job|s": 4, "job|d": 1}, "f": {"late": 5}, "b": {}, "s": 0})
    recent_reply = json.dumps({"h": {"job|s": 2}, "f": {"late": 2}, "b": {}, "s": 0})

    async def write() -> None:
        s: WorkerStore = worker_store(engine.config)
        s.samples.add(t, late_minute, late_reply)
        s.samples.add(t, recent_minute, recent_reply)
        assert await s.write_samples() == 1
        await s.client.aclose()
    asyncio.run(write())
    # Only the late minute is announced; the recent one is the roll-up's own work.
    marks = redis_client.smembers(engine.keys.history_late())
    assert [m.split(":")[0] for m in marks] == [str(late_minute)], marks

    _roll(engine, time.time())
    day = _stats(api, range="24h")["totals"]
    assert (day["succeeded"], day["dead_lettered"]) == (6, 1)
    assert _stats(api, range="24h", type="job")["totals"]["succeeded"] == 6
    # The 7-day range reads hours: the one the leader folded before the write, folded again.
    week = _stats(api, range="7d")["totals"]
    assert (week["succeeded"], week["dead_lettered"]) == (6, 1)  # the current hour's minutes read as they are
    assert _stats(api, range="7d", queue="late")["totals"]["succeeded"] == 6
    assert redis_client.hget(f"{engine.keys.history(t)}h:{late_minute // 60}", "job|s") == "4"
    assert redis_client.smembers(engine.keys.history_late()) == set()  # handled


def test_a_late_write_whose_fold_failed_is_folded_again_by_the_next_pass(
        live_engine: Engine, redis_client: redis.Redis) -> None:
    engine, api = live_engine, APIClient()
    t = engine.registry.ensure("late").tags[0]
    _roll(engine, time.time())
    late_minute = (int(time.time() // 60) - 180) // 60 * 60 + 10  # 3 hours ago, 10 past the hour
    redis_client.hset(f"{engine.keys.history(t)}m:{late_minute}", mapping={"job|s": 3})
    redis_client.sadd(engine.keys.history_late(), f"{late_minute}:w-test:1")
    broken = f"{engine.keys.history(t)}m:{late_minute + 1}"
    redis_client.set(broken, "not a hash")  # the partition hour's fold fails (WRONGTYPE)
    _roll(engine, time.time())
    assert redis_client.smembers(engine.keys.history_late()) == {f"{late_minute}:w-test:1"}  # kept for the next pass
    redis_client.delete(broken)
    _roll(engine, time.time())
    assert _stats(api, range="7d")["totals"]["succeeded"] == 3
    assert redis_client.smembers(engine.keys.history_late()) == set()
