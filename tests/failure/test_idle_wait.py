"""A worker frozen (SIGSTOP) while it waits idle on its partition's wake list: Redis still serves
the wait, so the frozen worker can be handed one batch, claimed by the fetch queued behind its
BLPOP. What it took is delayed by one visibility timeout, then a peer reclaims and runs it, and
the frozen worker, once it wakes, runs none of it. Real redis-server, real runworker_dtq
processes; single node (CLIENT LIST tells when the worker's wait is on)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import cont, env, execs, status, stop

pytestmark = [pytest.mark.slow, pytest.mark.single_node]

ATTEMPTS = 5  # a wait lasts at most 1 s: the batch must land before the frozen one's ends


def waits_on(client: redis.Redis) -> int:
    """Clients blocked in a BLPOP now (the workers' waits on wake lists)."""
    return sum(1 for c in client.client_list() if c.get("cmd") == "blpop" and "b" in c.get("flags", ""))


def test_a_worker_frozen_in_its_idle_wait_delays_what_it_took_by_one_visibility_timeout(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    keys = engine.keys
    a = start_worker("--name", "a", "--queues", "idle", "--concurrency", "2", **env())
    taken: list[str] = []
    ids: list[str] = []
    for _ in range(ATTEMPTS):
        wait_for(lambda: waits_on(redis_client) == 1, message=a.output)
        stop(a.pid)
        batch = engine.tasks.enqueue_many([engine.tasks.validate("failure.work", {"n": n}, queue="idle")
                                           for n in range(5)])
        ids = [str(t.id) for t in batch]
        taken = [t for t in ids if redis_client.hget(keys.task(t), "worker_id") == "a"]
        if taken:
            break
        # Its wait had ended (timed out) before the batch landed: let it run them, then again.
        cont(a.pid)
        wait_for(lambda ran=ids: all(status(redis_client, keys, t) == "SUCCEEDED" for t in ran),
                 message=a.output)
    # Its fetch ran once its wait ended, after the first of the batch's submits or a few more,
    # and took at most its --concurrency.
    assert 1 <= len(taken) <= 2, "the frozen worker's wait never took a batch"
    assert all(status(redis_client, keys, t) == "RUNNING" for t in taken)

    b = start_worker("--name", "b", "--queues", "idle", **env())
    # The other three at once; the two the frozen worker holds once they are idle past the
    # visibility timeout (2 s here), by b's reaper, as attempt 2.
    wait_for(lambda: all(status(redis_client, keys, t) == "SUCCEEDED" for t in ids), timeout=20, message=b.output)
    for t in ids:
        record = engine.tasks.get(t)
        assert record["worker_id"] == "b" and execs(redis_client, keys, t) == 1
        if t in taken:
            assert record["attempt"] == 2 and [e["error"] for e in record["errors"]] == ["dtq.WorkerLost"]
        else:
            assert record["attempt"] == 1

    # Woken, the frozen worker finds its claims taken over and runs none of them.
    cont(a.pid)
    wait_for(lambda: a.output().count("has since been taken over") == len(taken), message=a.output)
    assert all(execs(redis_client, keys, t) == 1 for t in ids)
