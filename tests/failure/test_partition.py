"""A network partition between one worker and Redis, injected for real: an nftables rule drops
every packet that worker's process sends to the Redis port while it holds tasks, and is removed
later. The worker itself stays up throughout (no SIGSTOP, no kill)."""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer
from .support import Events, Partition, counter, env, execs, outcomes, pending, started, statuses, task, total

pytestmark = pytest.mark.slow

# The partitioned worker runs as root (it must read the interpreter under /root) but in a group
# of its own, which the nftables rule matches (`meta skgid`); nothing else on the box uses it.
PARTITIONED_GID = 47000 + os.getpid() % 1000


@pytest.fixture
def partition(redis_server: RedisServer) -> Iterator[Partition]:
    cut = Partition(PARTITIONED_GID, redis_server.port)
    cut.open()
    try:
        yield cut
    finally:
        cut.close()


def _in_own_group() -> None:
    os.setgroups([])
    os.setgid(PARTITIONED_GID)


def test_a_partitioned_worker_loses_its_tasks_to_a_peer_and_its_late_completions_are_fenced(
        engine: Engine, redis_client: redis.Redis, redis_server: RedisServer, key_prefix: str, tmp_path: Path,
        partition: Partition, start_worker: Callable[..., WorkerProcess]) -> None:
    # It should survive: every task, with exactly one terminal outcome (the winning attempt's),
    # one terminal event and one count in the stats. The cut-off worker's tasks are reclaimed by
    # its peer; what it completes while cut off, and writes once the network heals, is fenced.
    keys = engine.keys
    cut_off = WorkerProcess(["--name", "cut", "--queues", "part", "--concurrency", "4"],
                            worker_env(redis_server.url, key_prefix, **env()), tmp_path / "cut.log",
                            preexec_fn=_in_own_group)
    try:
        peer = start_worker("--name", "peer", "--queues", "part", "--concurrency", "4", **env())
        logs = lambda: f"--- cut\n{cut_off.output()}\n--- peer\n{peer.output()}"  # noqa: E731
        wait_for(lambda: all(redis_client.zscore(keys.workers(), n) is not None for n in ("cut", "peer")),
                 timeout=30, message=logs)
        with Events(redis_client, keys) as events:
            # Eight slots for eight tasks: once all run, the cut-off worker holds exactly four.
            ids = [engine.tasks.enqueue("failure.awork", {"by_attempt": {"1": 5, "2": 0.2}}, queue="part").id
                   for _ in range(8)]
            wait_for(lambda: started(redis_client, keys, *ids), timeout=30, message=logs)
            held = [t for t in ids if task(redis_client, keys, t)["worker_id"] == "cut"]
            assert len(held) == 4, logs()
            partition.cut()
            try:
                # The peer finishes its own four, then reclaims the four whose owner went silent.
                wait_for(lambda: all(s == "SUCCEEDED" for s in statuses(redis_client, keys, ids)), timeout=40,
                         message=logs)
                for tid in held:
                    assert task(redis_client, keys, tid)["worker_id"] == "peer"
                # The cut-off worker's handlers ran to their end meanwhile; its completions wait in memory.
                assert counter(redis_client, keys, "fenced") == 0
                assert cut_off.proc.poll() is None
            finally:
                partition.heal()
            wait_for(lambda: counter(redis_client, keys, "fenced") == 4, timeout=30, message=logs)
            wait_for(lambda: "result discarded: a newer attempt owns it" in cut_off.output(), timeout=10, message=logs)

            for tid in ids:
                final = engine.tasks.get(tid)
                assert final["status"] == "SUCCEEDED" and final["worker_id"] == "peer", final
                assert final["result"]["pid"] == peer.pid, final  # the winning attempt's result
                expected = 2 if tid in held else 1
                assert final["attempt"] == expected and final["result"]["attempt"] == expected, final
                assert execs(redis_client, keys, tid) == expected
            stats = outcomes(redis_client, keys)
            assert stats.get("part|failure.awork|succeeded") == 8, stats
            assert counter(redis_client, keys, "redeliveries") == 4
            events.sync()  # every event published so far has been read
            terminal = Counter(e["task_id"] for e in events.seen if e.get("type") == "task.succeeded")
        assert terminal == dict.fromkeys(ids, 1)
        assert pending(redis_client, keys, ["part"]) == 0 and total(redis_client, keys, keys.running) == 0
        # Healed, the worker is back: registered with a fresh heartbeat, and it takes new work.
        wait_for(lambda: redis_client.zscore(keys.workers(), "cut") is not None
                 and time.time() * 1000 - redis_client.zscore(keys.workers(), "cut") < 3000, timeout=15,
                 message=logs)
        peer.kill()
        after = engine.tasks.enqueue("failure.awork", {"seconds": 0}, queue="part").id
        wait_for(lambda: engine.tasks.get(after)["status"] == "SUCCEEDED", timeout=20, message=logs)
        assert engine.tasks.get(after)["worker_id"] == "cut"
    finally:
        cut_off.kill()
