"""A group of 200 steps whose workers are SIGKILLed at random while it runs: every member still
finishes, the workflow's advance survives the crashes (the outbox and the leader's re-drive), and
the callback runs exactly once, with the sum of every member's result."""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import env, execs, log

pytestmark = pytest.mark.slow

MEMBERS = 200
KILLS = 8


def test_a_group_of_200_with_workers_killed_at_random_calls_back_once_with_the_sum(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    rng = random.Random()
    # The members' workers are the ones killed; the callback runs on a queue of its own, served by a
    # worker left alone, so "exactly once" is the advance's doing, not luck about who dies.
    callback_worker = start_worker("--name", "cb", "--queues", "cb", **env())
    members: list[WorkerProcess] = [start_worker("--name", f"m{i}", "--queues", "wfg", "--concurrency", "8", **env())
                                    for i in range(3)]
    wid = engine.workflows.submit({
        "group": [{"type": "wf.num", "payload": {"n": n, "pause": 0.3}, "queue": "wfg"} for n in range(1, MEMBERS + 1)],
        "then": {"type": "wf.sum", "queue": "cb"}})
    kills = 0
    deadline = time.monotonic() + 120
    while engine.workflows.get(wid)["status"] == "RUNNING" and time.monotonic() < deadline:
        time.sleep(rng.uniform(0.2, 0.6))
        if kills < KILLS:
            victim = rng.choice([w for w in members if w.proc.poll() is None])
            victim.kill()  # SIGKILL, mid-task or mid-advance: wherever it happens to be
            kills += 1
            members.remove(victim)
            members.append(start_worker("--name", f"m{3 + kills}", "--queues", "wfg", "--concurrency", "8", **env()))
    wait_for(lambda: engine.workflows.get(wid)["status"] == "SUCCEEDED", timeout=60,
             message=lambda: "\n".join(w.output()[-3000:] for w in [callback_worker, *members]))
    assert kills == KILLS
    wf = engine.workflows.get(wid)
    assert wf["steps_finished"] == MEMBERS + 1
    assert {s["status"] for s in wf["steps"]} == {"SUCCEEDED"}
    callback = wf["steps"][MEMBERS]
    sums = log(redis_client, engine.keys, "sum")
    assert len(sums) == 1, sums  # the callback ran exactly once...
    assert execs(redis_client, engine.keys, callback["task_id"]) == 1
    assert sums[0]["parent"] == list(range(1, MEMBERS + 1))  # ...with every member's result, in order
    assert engine.tasks.get(callback["task_id"])["result"] == MEMBERS * (MEMBERS + 1) // 2
    # Every member ran; some twice (at-least-once): their worker died under them, mid-run.
    assert all(execs(redis_client, engine.keys, s["task_id"]) >= 1 for s in wf["steps"][:MEMBERS])
    tags = {s["task_id"].split("-")[0] for s in wf["steps"][:MEMBERS]}
    assert sum(int(redis_client.hget(engine.keys.stats_counters(tag), "redeliveries") or 0) for tag in tags) >= 1
    # No outbox entry is left behind.
    wait_for(lambda: sum(redis_client.hlen(engine.keys.wf_outbox(s["task_id"].split("-")[0]))
                         for s in wf["steps"]) == 0, timeout=15)
