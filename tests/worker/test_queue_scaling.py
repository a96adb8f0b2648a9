"""What queues cost a real worker: an idle one serving every queue does the same Redis work per
round with 2,000 queues (2,000 partitions) as with one, and a paused queue costs nothing and keeps
its order.

Each test runs its own redis-server, so INFO commandstats counts only this worker's commands.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.worker.reclaim import RUNNING_SWEEP, SWEEP_PARTITIONS

from ..conftest import WorkerProcess, wait_for, worker_env
from ..failure.support import FAST
from ..redis_server import RedisServer

PREFIX = "dtqscale"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis", appendonly=False) as server:
        yield server


def _calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def _make_queues(server: RedisServer, names: list[str]) -> None:
    """The state junk submits leave behind once their tasks ran: registered queues, their
    partitions opened, empty streams."""
    registry = Engine(DtqConfig(redis_url=server.url, key_prefix=PREFIX, max_queues=0)).registry
    for name in names:
        registry.ensure(name)


def _worker(server: RedisServer, tmp_path: Path, *args: str, **env: object) -> WorkerProcess:
    return WorkerProcess(["--name", "scale-w", *args], worker_env(server.url, PREFIX, **env),
                         tmp_path / "worker.log")


def _idle_reads(server: RedisServer, tmp_path: Path, queues: int) -> tuple[dict[str, int], float]:
    """The calls an idle worker serving every queue makes in 3 s: XREADGROUP (fetches), XPENDING
    (the reaper's look for idle entries, one pipeline per round) and ZCARD (its look at running
    indexes); and one task's latency from submit to SUCCEEDED."""
    client = redis.Redis.from_url(server.url, decode_responses=True)
    engine = Engine(DtqConfig(redis_url=server.url, key_prefix=PREFIX, max_queues=0))
    names = [f"junk-{n:05d}" for n in range(queues)]
    _make_queues(server, names)
    # A reaper round every 0.5 s.
    worker = _worker(server, tmp_path, DTQ_VISIBILITY_TIMEOUT_S=2, DTQ_HEARTBEAT_INTERVAL_S=0.5)
    try:
        # At start it sweeps every partition once (three reads each) and finds each drained: from
        # then on it is idle, waiting on its subscription.
        wait_for(lambda: _calls(client, "xreadgroup") >= 3 * queues and _calls(client, "xpending") >= 1,
                 timeout=60, message=worker.output)
        client.config_resetstat()
        time.sleep(3)  # the measurement window, not a synchronisation
        calls = {c: _calls(client, c) for c in ("xreadgroup", "xpending", "zcard")}
        started = time.monotonic()
        task_id = engine.tasks.enqueue("dtq.echo", queue=names[len(names) // 2]).id
        wait_for(lambda: engine.tasks.get(task_id)["status"] == "SUCCEEDED", timeout=30, interval=0.005,
                 message=worker.output)
        return calls, time.monotonic() - started
    finally:
        worker.kill()


@pytest.mark.slow
def test_an_idle_worker_reads_nothing_however_many_queues_exist(private_redis: RedisServer, tmp_path: Path) -> None:
    calls, latency = _idle_reads(private_redis, tmp_path, 2000)
    # Idle, it waits on its subscription and reads no stream: once, every round read all 6,000.
    # The reaper looks only at partitions with tasks in flight (none), found from the running
    # indexes of at most RUNNING_SWEEP partitions per round, and at a round-robin slice of
    # SWEEP_PARTITIONS others: once, each of its rounds (every 0.5 s here) looked at every stream.
    assert calls["xreadgroup"] <= 10, calls
    assert calls["xpending"] <= 8 * 3 * SWEEP_PARTITIONS, calls
    assert calls["zcard"] <= 8 * RUNNING_SWEEP, calls
    assert latency < 2.0, latency


@pytest.mark.slow
def test_a_paused_queue_costs_nothing_and_keeps_its_order(private_redis: RedisServer, tmp_path: Path) -> None:
    client = redis.Redis.from_url(private_redis.url, decode_responses=True)
    engine = Engine(DtqConfig(redis_url=private_redis.url, key_prefix=PREFIX))
    submitted: dict[str, list[str]] = {"high": [], "normal": []}
    priorities = ["high" if n % 3 == 0 else "normal" for n in range(300)]
    queued = engine.tasks.enqueue_many([engine.tasks.validate("failure.work", {"seconds": 0.005, "n": n},
                                                              queue="steady", priority=priority)
                                        for n, priority in enumerate(priorities)])
    for priority, task in zip(priorities, queued, strict=True):
        submitted[priority].append(task.id)  # type: ignore[union-attr]  # none was refused
    runs_key = f"{PREFIX}:testlog:runs"
    worker = _worker(private_redis, tmp_path, "--concurrency", "1", **FAST)
    try:
        wait_for(lambda: client.llen(runs_key) >= 20, timeout=60, message=worker.output)
        engine.queues.pause("steady", Actor.cli())
        client.config_resetstat()
        ran_at_pause = client.llen(runs_key)
        time.sleep(3)  # the measurement window, not a synchronisation
        churn = {c: _calls(client, c) for c in ("xadd", "xclaim", "xdel")}
        # The attempt in flight when the pause landed finishes (one XDEL, maybe a heartbeat's
        # XCLAIM), and the one row claimed ahead (--concurrency 1) either starts before the worker
        # sees the pause or goes back to its stream (an XADD and an XDEL); nothing else of the
        # paused queue is read, put back or started.
        assert churn["xadd"] <= 1 and churn["xclaim"] <= 3 and churn["xdel"] <= 2, churn
        assert client.llen(runs_key) <= ran_at_pause + 2
        engine.queues.resume("steady", Actor.cli())
        wait_for(lambda: client.llen(runs_key) >= 300, timeout=120, message=worker.output)
    finally:
        worker.kill()
    order = [run.split("|")[0] for run in client.lrange(runs_key, 0, -1)]
    assert len(order) == len(set(order)) == 300  # each ran once
    for priority, ids in submitted.items():
        # Submit order within the band, but for the one row claimed ahead that the pause may have
        # put back at the tail.
        ran = [t for t in order if t in set(ids)]
        assert ran == ids or any(ran == ids[:i] + ids[i + 1:] + [ids[i]] for i in range(len(ids))), priority
