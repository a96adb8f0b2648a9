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
    members: dict[str, WorkerProcess] = {}

    def spawn(name: str) -> None:
        members[name] = start_worker("--name", name, "--queues", "wfg", "--concurrency", "8", **env())

    for i in range(3):
        spawn(f"m{i}")
    wid = engine.workflows.submit({
        "group": [{"type": "wf.num", "payload": {"n": n, "pause": 0.6}, "queue": "wfg"} for n in range(1, MEMBERS + 1)],
        "then": {"type": "wf.sum", "queue": "cb"}})
    tags = {s["task_id"].split("-")[0] for s in engine.workflows.get(wid)["steps"][:MEMBERS]}

    def busy() -> set[str]:
        """The workers running a member right now (as the task records say)."""
        ids = [i for tag in tags for i in redis_client.zrange(engine.keys.running(tag), 0, -1)]
        return {w for w in (redis_client.hget(engine.keys.task(i), "worker_id") for i in ids) if w}

    kills = 0
    deadline = time.monotonic() + 120
    while engine.workflows.get(wid)["status"] == "RUNNING" and time.monotonic() < deadline and kills < KILLS:
        time.sleep(rng.uniform(0.1, 0.4))
        victims = sorted(name for name in busy() if name in members and members[name].proc.poll() is None)
        if not victims:
            continue
        name = rng.choice(victims)
        members.pop(name).kill()  # SIGKILL, mid-task, mid-completion or mid-advance
        kills += 1
        spawn(f"m{2 + kills}")
    wait_for(lambda: engine.workflows.get(wid)["status"] == "SUCCEEDED", timeout=60,
             message=lambda: "\n".join(w.output()[-3000:] for w in [callback_worker, *members.values()]))
    assert kills >= 3, kills  # the run lasted long enough to kill busy workers several times
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
    assert sum(int(redis_client.hget(engine.keys.stats_counters(tag), "redeliveries") or 0) for tag in tags) >= 1
    # No outbox entry is left behind.
    wait_for(lambda: sum(redis_client.hlen(engine.keys.wf_outbox(s["task_id"].split("-")[0]))
                         for s in wf["steps"]) == 0, timeout=15)
