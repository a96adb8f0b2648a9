"""Flow control (issue 22) with real worker processes: the limits hold across every worker,
measured from the outside (the queue's RUNNING count sampled through the engine while the workers
run, and the runs the handlers logged)."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..conftest import WorkerProcess, wait_for
from .support import ENV, Sampler, intervals, most_at_once, runs

pytestmark = pytest.mark.slow
ACTOR = Actor(name="test", source="cli")


@pytest.fixture
def live(config: DtqConfig) -> Engine:
    """An engine on the real clock (the limits' windows are the workers' time)."""
    return Engine(config)


def _all_done(engine: Engine, ids: list[str]) -> Callable[[], bool]:
    def check() -> bool:
        pipe = engine.client.pipeline(transaction=False)
        for tid in ids:
            pipe.hget(engine.keys.task(tid), "status")
        return all(s == "SUCCEEDED" for s in pipe.execute())
    return check


def test_three_workers_of_eight_never_run_more_than_the_queue_concurrency(
        live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    live.limits.set("capped", {"concurrency": 2}, actor=ACTOR)
    ids = [live.tasks.enqueue("limits.sleep", {"seconds": 0.2}, queue="capped").id for _ in range(20)]
    workers = [start_worker("--name", f"w{i}", "--queues", "capped", "--concurrency", "8", **ENV) for i in range(3)]
    with Sampler(live, "capped", ids) as sampler:
        wait_for(_all_done(live, ids), timeout=60, message=lambda: workers[0].output())
    assert sampler.samples > 50
    assert sampler.usage_max == 2 and sampler.status_max <= 2
    assert most_at_once(intervals(redis_client, key_prefix)) <= 2
    assert live.limits.get("capped")["usage"]["running"] == 0
    assert live.limits.get("capped")["usage"]["throttled_total"] > 0
    # More than one worker took part: the limit is the queue's, not a worker's.
    assert len({t["worker_id"] for t in (live.tasks.get(i) for i in ids)}) >= 2


def test_a_rate_of_five_per_second_stretches_thirty_tasks_over_about_six_seconds(
        live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    live.limits.set("paced", {"rate": {"limit": 5, "period_s": 1}}, actor=ACTOR)
    ids = [live.tasks.enqueue("limits.sleep", {"seconds": 0}, queue="paced").id for _ in range(30)]
    workers = [start_worker("--name", f"w{i}", "--queues", "paced", "--concurrency", "8", **ENV) for i in range(3)]
    wait_for(_all_done(live, ids), timeout=30, message=lambda: workers[0].output())
    # When each was claimed (RUNNING from then on: the limit counts claims, by the workers' clocks).
    starts = sorted(int(redis_client.hget(live.keys.task(i), "started_at")) for i in ids)
    assert len(starts) == 30
    span = (starts[-1] - starts[0]) / 1000
    assert 4.5 <= span <= 8.0, span  # 5 per second: batches at 0, 1, ..., 5 s
    # Never more than 5 starts in any one-second window.
    assert max(sum(1 for s in starts if t <= s < t + 1000) for t in starts) <= 5


def test_group_concurrency_one_never_overlaps_a_group_while_other_groups_run(
        live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    live.limits.set("tenants", {"group_concurrency": 1}, actor=ACTOR)
    ids = []
    for _ in range(8):  # a flood from tenant a first, then the others
        ids.append(live.tasks.enqueue("limits.sleep", {"seconds": 0.3, "group": "a"}, queue="tenants",
                                      group_key="a").id)
    for g in "bcd":
        for _ in range(2):
            ids.append(live.tasks.enqueue("limits.sleep", {"seconds": 0.3, "group": g}, queue="tenants",
                                          group_key=g).id)
    assert live.tasks.get(ids[0])["group_key"] == "a"
    workers = [start_worker("--name", f"w{i}", "--queues", "tenants", "--concurrency", "8", **ENV) for i in range(2)]
    wait_for(_all_done(live, ids), timeout=60, message=lambda: workers[0].output())
    spans = intervals(redis_client, key_prefix)
    for g in "abcd":
        assert most_at_once([s for s in spans if s[2] == g]) == 1, g
    # Other groups were not stuck behind a's flood: b, c and d all finished before a did.
    end_of = {g: max(e for _, e, grp, _ in spans if grp == g) for g in "abcd"}
    assert max(end_of["b"], end_of["c"], end_of["d"]) < end_of["a"]
    assert most_at_once(spans) >= 3  # groups ran side by side
    assert not any(live.tasks.get(i)["attempt"] != 1 for i in ids)  # waiting is not an attempt


def test_a_killed_worker_holding_the_slots_frees_them_within_the_visibility_timeout(
        live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    live.limits.set("held", {"concurrency": 2, "group_concurrency": 1}, actor=ACTOR)
    long = [live.tasks.enqueue("limits.sleep", {"seconds": 60, "group": g}, queue="held", group_key=g).id
            for g in ("x", "y")]
    a = start_worker("--name", "a", "--queues", "held", "--concurrency", "4", **ENV)
    wait_for(lambda: all(live.tasks.get(t)["status"] == "RUNNING" for t in long), message=a.output)
    short = [live.tasks.enqueue("limits.sleep", {"seconds": 0, "group": "x"}, queue="held", group_key="x").id
             for _ in range(3)]
    a.kill()
    killed_at = time.monotonic()
    b = start_worker("--name", "b", "--queues", "held", "--concurrency", "4", **ENV)
    # The lost attempts run again on b (reclaimed after the visibility timeout, 2 s, holding the
    # same slots) ... and the short ones of group x after them: nothing leaked.
    for t in long:
        wait_for(lambda t=t: live.tasks.get(t)["attempt"] == 2 and live.tasks.get(t)["status"] == "RUNNING",
                 timeout=15, message=b.output)
    assert time.monotonic() - killed_at < 2 + 8
    usage = live.limits.get("held")["usage"]
    assert usage["running"] == 2 and usage["groups_running"] == 2
    for t in long:
        live.tasks.cancel(t, ACTOR)
    wait_for(_all_done(live, short), timeout=20, message=b.output)
    wait_for(lambda: live.limits.get("held")["usage"]["running"] == 0, timeout=10, message=b.output)
    assert live.limits.get("held")["usage"]["groups_running"] == 0
    assert redis_client.hlen(live.keys.limits_held(live.registry.get("held", fresh=True).tags[0])) == 0


@pytest.mark.parametrize("scope", ["queue", "group"])
def test_rate_limited_pauses_the_queue_or_group_and_costs_no_attempt(
        scope: str, live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    first = live.tasks.enqueue("limits.rate_limited", {"retry_after": 3, "scope": scope, "group": "g1"},
                               queue="apis", group_key="g1", max_attempts=1).id
    w = start_worker("--name", "w", "--queues", "apis", "--concurrency", "4", **ENV)
    wait_for(lambda: live.tasks.get(first)["status"] == "PENDING", message=w.output)
    until = int(redis_client.hget(live.keys.task(first), "due_at"))  # the pause's end
    same = live.tasks.enqueue("limits.sleep", {"seconds": 0, "group": "g1"}, queue="apis", group_key="g1").id
    other = live.tasks.enqueue("limits.sleep", {"seconds": 0, "group": "g2"}, queue="apis", group_key="g2").id
    wait_for(_all_done(live, [first, same, other]), timeout=20, message=w.output)
    task = live.tasks.get(first)
    # One attempt, though the handler ran twice (max_attempts 1: a counted attempt would have failed it).
    assert task["attempt"] == 1 and task["status"] == "SUCCEEDED" and task["errors"] == []
    assert len([r for r in runs(redis_client, key_prefix) if r["task"] == first and r["kind"] == "start"]) == 2
    started = {r["task"]: r["at"] for r in runs(redis_client, key_prefix) if r["kind"] == "start"}
    assert started[same] >= until - 50  # its group (or queue) was paused for 3 s
    if scope == "group":
        assert started[other] < until - 500  # another group went on
    else:
        assert started[other] >= until - 50
    assert live.queues.get("apis")["dlq"] == 0


def test_a_worker_held_back_by_a_limit_does_not_poll_and_serves_its_other_queues(
        live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    live.limits.set("slow", {"concurrency": 1}, actor=ACTOR)
    live.limits.set("paced", {"rate": {"limit": 1, "period_s": 3}}, actor=ACTOR)
    blocker = live.tasks.enqueue("limits.sleep", {"seconds": 4}, queue="slow").id
    waiting = [live.tasks.enqueue("limits.sleep", {"seconds": 0}, queue="slow").id for _ in range(3)]
    paced = [live.tasks.enqueue("limits.sleep", {"seconds": 0}, queue="paced").id for _ in range(2)]
    # A visibility timeout well above the blocker's 4 s: on a loaded machine a 2 s one let a peer
    # reclaim the blocker from a worker whose heartbeats ran late, again and again, until its
    # attempts ran out (the test is about polling while held back, not about reclaims).
    env = {**ENV, "DTQ_VISIBILITY_TIMEOUT_S": 15}
    workers = [start_worker("--name", f"w{i}", "--queues", "slow,paced,free", "--concurrency", "8", **env)
               for i in range(2)]
    wait_for(lambda: live.tasks.get(blocker)["status"] == "RUNNING", message=workers[0].output)
    wait_for(lambda: live.tasks.get(paced[0])["status"] == "SUCCEEDED", message=workers[0].output)
    before = {q: live.limits.get(q)["usage"]["throttled_total"] for q in ("slow", "paced")}
    # Meanwhile another queue of the same workers runs at once.
    free = [live.tasks.enqueue("limits.sleep", {"seconds": 0}, queue="free").id for _ in range(20)]
    wait_for(_all_done(live, free), timeout=15, message=workers[0].output)
    time.sleep(1.5)  # a stretch of held-back time: count the fetches it cost
    after = {q: live.limits.get(q)["usage"]["throttled_total"] for q in ("slow", "paced")}
    # A spinning worker would fetch hundreds of times a second; each held-back fetch is counted.
    assert after["slow"] - before["slow"] <= 4 and after["paced"] - before["paced"] <= 4, (before, after)
    assert all(live.tasks.get(t)["status"] == "QUEUED" for t in waiting)
    wait_for(_all_done(live, [blocker, *waiting, *paced]), timeout=20, message=workers[0].output)


def test_rate_limited_pauses_every_partition_of_a_partitioned_queue(
        config: DtqConfig, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    import dataclasses

    live = Engine(dataclasses.replace(config, queue_partitions=(("wide", 3),)))
    first = live.tasks.enqueue("limits.rate_limited", {"retry_after": 2}, queue="wide").id
    w = start_worker("--name", "w", "--queues", "wide", "--concurrency", "4",
                     DTQ_QUEUE_PARTITIONS="wide=3", **ENV)
    tags = live.registry.get("wide", fresh=True).tags
    wait_for(lambda: all(redis_client.hget(live.keys.limits(t), "pause_until") for t in tags), message=w.output)
    until = min(int(redis_client.hget(live.keys.limits(t), "pause_until")) for t in tags)
    others = [live.tasks.enqueue("limits.sleep", {"seconds": 0}, queue="wide").id for _ in range(6)]
    assert len({t.split("-")[0] for t in others}) == 3  # every partition got some
    wait_for(_all_done(live, [first, *others]), timeout=20, message=w.output)
    started = {r["task"]: r["at"] for r in runs(redis_client, key_prefix) if r["kind"] == "start"}
    assert min(started[t] for t in others) >= until - 50


def test_slots_of_a_killed_worker_whose_tasks_are_out_of_attempts_go_to_the_waiting_tasks(
        live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    live.limits.set("held", {"concurrency": 2}, actor=ACTOR)
    long = [live.tasks.enqueue("limits.sleep", {"seconds": 60}, queue="held", max_attempts=1).id for _ in range(2)]
    a = start_worker("--name", "a", "--queues", "held", "--concurrency", "4", **ENV)
    wait_for(lambda: all(live.tasks.get(t)["status"] == "RUNNING" for t in long), message=a.output)
    waiting = [live.tasks.enqueue("limits.sleep", {"seconds": 0}, queue="held").id for _ in range(4)]
    b = start_worker("--name", "b", "--queues", "held", "--concurrency", "4", **ENV)
    time.sleep(0.5)
    assert all(live.tasks.get(t)["status"] == "QUEUED" for t in waiting)  # the queue is full
    a.kill()
    killed_at = time.monotonic()
    wait_for(_all_done(live, waiting), timeout=15, message=b.output)
    # The visibility timeout (2 s) plus one reaper period, not a leak.
    assert time.monotonic() - killed_at < 2 + 5
    assert [live.tasks.get(t)["status"] for t in long] == ["DEAD_LETTERED", "DEAD_LETTERED"]
    assert live.limits.get("held")["usage"]["running"] == 0


@pytest.mark.parametrize("limit", ["rate", "group_rate"])
def test_a_rate_counts_handler_starts_a_worker_claims_nothing_ahead_of_its_slots(
        limit: str, live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    # A rate is counted at the claim. A worker whose slots turn over claims rows ahead of them (its
    # backlog), which start later: a row claimed while a long task ran started 1.5 s after its
    # token was taken, and made four handler starts in a window of two seconds.
    live.limits.set("rq", {limit: {"limit": 3, "period_s": 2}}, actor=ACTOR)
    group = {"group_key": "g"} if limit == "group_rate" else {}
    seconds = [0, 1.5, 0, 0, 0, 0]  # the first turns the one slot over; the second holds it
    ids = [live.tasks.enqueue("limits.sleep", {"seconds": s}, queue="rq", **group).id for s in seconds]
    w = start_worker("--name", "w", "--queues", "rq", "--concurrency", "1", **ENV)
    wait_for(_all_done(live, ids), timeout=30, message=w.output)
    starts = sorted(start for start, *_ in intervals(redis_client, key_prefix))
    assert len(starts) == len(ids)
    # The window counts claims; a handler starts a few ms after its claim, later for the first
    # (its thread starts): windows of 1.75 s, not 2, absorb that. A row claimed ahead started
    # 1.5 s late, with three more starts after it within 0.5 s.
    most = max(sum(1 for s in starts if first <= s < first + 1750) for first in starts)  # ms
    assert most <= 3, [round((s - starts[0]) / 1000, 3) for s in starts]


def test_a_task_that_meets_429s_makes_no_more_calls_than_the_rate_allows(
        live: Engine, redis_client: redis.Redis, key_prefix: str,
        start_worker: Callable[..., WorkerProcess]) -> None:
    # Each RateLimited puts the task back at the same attempt number, and each run is a start: the
    # window counted them as one (its members were "<task id>:<attempt>"), so a handler meeting
    # three 429s called the API five times in under a second under a rate of 2 per window.
    live.limits.set("api", {"rate": {"limit": 2, "period_s": 10}}, actor=ACTOR)
    a = live.tasks.enqueue("limits.api_call", {"fail": 3, "retry_after": 0.2}, queue="api").id
    w = start_worker("--name", "w", "--queues", "api", "--concurrency", "2", **ENV)
    wait_for(lambda: live.tasks.get(a)["status"] == "SUCCEEDED", timeout=60, message=w.output)
    b = live.tasks.enqueue("limits.api_call", {}, queue="api").id
    time.sleep(3)  # b may start only once the window lets it (10 s after a's third call)
    assert live.tasks.get(b)["status"] == "QUEUED"
    starts = sorted(r["at"] for r in runs(redis_client, key_prefix) if r["kind"] == "start")
    assert len(starts) == 4  # a's four calls
    # The window counts claims; a handler starts a few ms after its claim: windows of 9.75 s, not
    # 10, absorb that (as in the rate test above).
    most = max(sum(1 for s in starts if first <= s < first + 9750) for first in starts)  # ms
    assert most <= 2, [round((s - starts[0]) / 1000, 2) for s in starts]
