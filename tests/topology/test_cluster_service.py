"""The whole service on Redis Cluster (DTQ_REDIS_URL=redis+cluster://<seed nodes>): the API (daphne)
and real worker processes serve a queue of six partitions, two on each of the 3 masters; then one
master is SIGKILLed while 5,000 tasks flow, and its replica takes over. Every worker and the API
carry on by themselves within seconds of the promotion, and nothing stays stuck; with
DTQ_REDIS_MIN_REPLICAS=1 no acknowledged task is lost, and with 0 the loss is counted and printed
(docs/failure-modes.md, "Failover"). The Sentinel counterpart is test_sentinel_service.py, whose
helpers this reuses.

The master killed is the one the workers' wake subscriptions listen on (redis-py's cluster
pub/sub connects to the master of the channel's slot), so the subscription dies with it as well as
two partitions, and the killed master is one of the URL's seed nodes. With DTQ_REDIS_MIN_REPLICAS=1
that master gets a second replica first: the promoted one must have a replica to confirm writes.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dtq_core.config import DtqConfig
from dtq_core.connection import cluster_client
from dtq_core.engine import Engine
from dtq_core.keys import tag_of
from dtq_core.partitions import Layout
from dtq_core.submit import Submission

from ..conftest import wait_for
from ..redis_server import RedisServer
from ..redis_topologies import ClusterSetup, client
from .test_sentinel_service import (  # noqa: F401 - prefix and started are fixtures
    SUBMIT_TROUBLE,
    WORKER_CONCURRENCY,
    WORKER_ENV,
    http,
    prefix,
    start_api,
    start_workers,
    started,
)

pytestmark = pytest.mark.slow

TASKS = 5000
BATCH = 50
KILL_AFTER = 2000  # acknowledged submits before the master is killed: mid-run
WORKERS = 3
QUEUE = "failover"
PARTITIONS = 6  # two on each master (the registry spreads a queue's partitions evenly)
RECOVERY_S = 10.0  # the API and every worker must carry on within this of the promotion
SETTLE_S = 30.0  # after the submits, how long every task has to end (reclaims take a visibility timeout)
# Each worker holds at most 2 × WORKER_CONCURRENCY (running, and claimed ahead for the slots that
# free next): this many tasks of a second each cannot all go to WORKERS - 1 workers.
PROBE_TASKS = 2 * WORKER_CONCURRENCY * WORKERS
PROBE_TASK_S = 1.0
FIELDS = ("status", "attempt", "worker_id", "started_at")


def key_in(layout: Layout, tag: str, name: str) -> str:
    """An idempotency key that places its task in partition `tag` (Layout.tag_for)."""
    for n in range(10_000):
        key = f"{name}-{n}"
        if layout.tags[zlib.crc32(key.encode()) % len(layout.tags)] == tag:
            return key
    raise AssertionError(f"no key lands in partition {tag}")


def records(redis_client: Any, engine: Engine, ids: list[str]) -> list[list[str | None]]:
    """FIELDS of each task's record (all None: the record is gone), one pipeline (split by master)."""
    pipe = redis_client.pipeline(transaction=False)
    for task_id in ids:
        pipe.hmget(engine.keys.task(task_id), FIELDS)
    return list(pipe.execute())


@pytest.mark.parametrize("min_replicas", [0, 1])
def test_a_cluster_failover_mid_run(fresh_cluster: ClusterSetup, prefix: str, tmp_path: Path,  # noqa: F811
                                    started: list[Any], min_replicas: int) -> None:  # noqa: F811
    url = fresh_cluster.url
    env = {**WORKER_ENV, "DTQ_REDIS_MIN_REPLICAS": min_replicas, "DTQ_QUEUE_PARTITIONS": f"{QUEUE}={PARTITIONS}"}
    config = DtqConfig(redis_url=url, key_prefix=prefix, redis_min_replicas=min_replicas,
                       queue_partitions=((QUEUE, PARTITIONS),), accept_unknown_types=True)
    engine = Engine(config)
    layout = engine.registry.ensure(QUEUE)
    # The victim: the master of the wake channel's slot, where every worker's subscription is.
    victim_port = int(engine.client.get_node_from_key(engine.keys.wake()).port)  # type: ignore[attr-defined]
    victim = next(s for s in fresh_cluster.masters() if s.port == victim_port)
    moved = {tag for tag in layout.tags if int(engine.client.get_node_from_key(  # type: ignore[attr-defined]
        engine.keys.partition(tag)).port) == victim_port}
    assert len(moved) == PARTITIONS // 3, "the queue's partitions are not spread over the masters"
    if min_replicas:
        # A shard of one master and one replica has no replica once that replica is promoted: every
        # write there would wait for one in vain (503 REDIS_REPLICATION_TIMEOUT) until the failed
        # node came back. As deployment.md says, such a shard needs a second replica.
        fresh_cluster.add_replica(victim)
    submissions: list[Submission] = [engine.tasks.validate("dtq.echo", {"n": n}, queue=QUEUE,
                                                           idempotency_key=f"failover-{n}") for n in range(TASKS)]
    batches: dict[str, deque[list[Submission]]] = {tag: deque() for tag in layout.tags}
    for tag in layout.tags:
        mine = [s for s in submissions if layout.tag_for(s.idempotency_key) == tag]
        batches[tag].extend(mine[i:i + BATCH] for i in range(0, len(mine), BATCH))
    acknowledged: list[str] = []

    workers = start_workers(started, tmp_path, url, prefix, WORKERS, **env)
    api = start_api(started, tmp_path / "api", url, prefix, **env)
    kill_now, killed = threading.Event(), threading.Event()
    times: dict[str, float] = {}  # seconds after the SIGKILL
    promoted: list[RedisServer] = []  # the replica promoted in place of the victim

    def kill() -> None:
        kill_now.wait(60)

        def now_dead() -> None:
            times["kill"], times["kill_wall"] = time.monotonic(), time.time()
            killed.set()

        promoted.append(fresh_cluster.kill_master(victim, on_kill=now_dead))
        times["promoted"] = time.monotonic() - times["kill"]

    def until(name: str, recovered: Callable[[], bool]) -> None:
        """Poll from the SIGKILL until recovered() holds; note when (missing: it never did)."""
        killed.wait(60)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if recovered():
                    times[name] = time.monotonic() - times["kill"]
                    return
            except Exception:  # noqa: BLE001 - a probe of a cluster in failover: any error is "not yet"
                pass
            time.sleep(0.1)

    probes = iter(range(1_000_000))

    def api_submits() -> bool:  # into each partition that moved, through the API
        return all(http(api, "POST", "/api/v1/tasks", {
            "type": "dtq.echo", "queue": QUEUE, "idempotency_key": key_in(layout, tag, f"probe-{next(probes)}")},
            timeout=2)[0] == 201 for tag in sorted(moved))

    watcher_client = cluster_client(config)

    def workers_beat() -> bool:  # every worker heartbeating since the SIGKILL
        since = times["kill_wall"] * 1000
        return all((watcher_client.zscore(engine.keys.workers(), f"w{i}") or 0) > since for i in range(WORKERS))

    watchers = [threading.Thread(target=kill, daemon=True),
                threading.Thread(target=until, args=("api", api_submits), daemon=True),
                threading.Thread(target=until, args=("heartbeats", workers_beat), daemon=True)]
    for watcher in watchers:
        watcher.start()
    # 1. Submit in paced batches, each into one partition (as many producers would), the partitions
    # in turn: a batch into a partition whose master is down is retried (same idempotency keys)
    # until it is acknowledged, while the other partitions' batches go on. Once KILL_AFTER are
    # acknowledged, the SIGKILL.
    wait_for(lambda: len(engine.workers.list()) == WORKERS, timeout=30, message=workers[0].output)
    deadline = time.monotonic() + 60
    while any(batches.values()):
        for tag, waiting in batches.items():
            if not waiting:
                continue
            try:
                acknowledged.extend(e.id for e in engine.tasks.enqueue_many(waiting[0]))  # type: ignore[union-attr]
                waiting.popleft()
            except SUBMIT_TROUBLE as exc:
                if time.monotonic() > deadline:
                    raise AssertionError(f"submits into partition {tag} did not recover: {exc!r}") from exc
            if len(acknowledged) >= KILL_AFTER:
                kill_now.set()
            time.sleep(0.05)
    for watcher in watchers:
        watcher.join(40)
    # 2. The replica was promoted, and the API (a submit into each moved partition succeeds) and
    # every worker (alive, heartbeating) carried on by themselves, within seconds.
    assert "promoted" in times, "no promotion"
    for worker in workers:
        assert worker.proc.poll() is None, worker.output()
    for name in ("api", "heartbeats"):
        assert times.get(name, 1e9) - times["promoted"] < RECOVERY_S, f"{name}: {times}"
    # 3. Every acknowledged task ends SUCCEEDED, or is lost: its record gone, or still unfinished
    # once the run has settled; none stays RUNNING.
    assert len(set(acknowledged)) == TASKS
    reader = cluster_client(config)

    def settled() -> bool:
        return all(r[0] in ("SUCCEEDED", None) for r in records(reader, engine, acknowledged))

    def stuck() -> str:
        left = [r[0] for r in records(reader, engine, acknowledged) if r[0] not in ("SUCCEEDED", None)]
        return f"{len(left)} tasks stuck: {sorted(set(left))}; {times}"

    try:
        wait_for(settled, timeout=SETTLE_S, interval=0.25)
    except AssertionError:
        pass  # counted below: RUNNING is never acceptable, anything else left is lost
    final = records(reader, engine, acknowledged)
    assert not any(r[0] == "RUNNING" for r in final), stuck()
    gone = sum(1 for r in final if r[0] is None)
    left = sum(1 for r in final if r[0] not in ("SUCCEEDED", None))
    rerun = sum(1 for r in final if r[1] and int(r[1]) > 1)
    # 4. The workers ran tasks of the moved partitions again, from the promoted replica, within
    # RECOVERY_S of the promotion (task records say who started them, and when).
    promoted_ms = (times["kill_wall"] + times["promoted"]) * 1000
    first_start: dict[str, float] = {}
    for task_id, (status, _, worker_id, started_at) in zip(acknowledged, final, strict=True):
        if status and worker_id and started_at and tag_of(task_id) in moved and float(started_at) > promoted_ms:
            first_start[worker_id] = min(first_start.get(worker_id, 1e18), float(started_at))
    assert first_start, f"no worker ran a task of the moved partitions after the promotion: {times}"
    times["workers"] = max(first_start.values()) / 1000 - times["kill_wall"]
    assert times["workers"] - times["promoted"] < RECOVERY_S, times
    # A worker can find none of the run's tasks left there (the others took them while it waited
    # out a fetch retry), so to be sure every worker fetches from the promoted replica: more slow
    # tasks than the other workers can hold at once (running, and claimed ahead), into the moved
    # partitions. Each worker starts some of them within RECOVERY_S.
    probe_at = time.time()
    probe_ids = [e.id for e in engine.tasks.enqueue_many([  # type: ignore[union-attr]
        engine.tasks.validate("dtq.sleep", {"seconds": PROBE_TASK_S}, queue=QUEUE,
                              idempotency_key=key_in(layout, tag, f"after-{tag}-{n}"))
        for tag in sorted(moved) for n in range(PROBE_TASKS // len(moved))])]
    wait_for(lambda: all(r[0] == "SUCCEEDED" for r in records(reader, engine, probe_ids)), timeout=SETTLE_S,
             interval=0.25, message=lambda: f"probe tasks not done: {times}")
    probe_start: dict[str, float] = {}
    for status, _, worker_id, started_at in records(reader, engine, probe_ids):
        assert worker_id and started_at, (status, worker_id, started_at)
        probe_start[worker_id] = min(probe_start.get(worker_id, 1e18), float(started_at) / 1000 - probe_at)
    assert sorted(probe_start) == [f"w{i}" for i in range(WORKERS)], f"workers back on the promoted replica: " \
        f"{sorted(probe_start)} ({sorted(first_start)} in the run); {times}\n{workers[0].output()[-3000:]}"
    assert max(probe_start.values()) < RECOVERY_S, probe_start
    # 5. Meanwhile the partitions on the other masters were served on (printed, not asserted: Redis
    # answers CLUSTERDOWN everywhere once the dead master is marked failing, until the promotion):
    # tasks started there between the SIGKILL and the promotion.
    kill_ms = times["kill_wall"] * 1000
    during = sum(1 for task_id, (_, _, _, started_at) in zip(acknowledged, final, strict=True)
                 if started_at and tag_of(task_id) not in moved and kill_ms < float(started_at) < promoted_ms)
    print(f"\ncluster failover DTQ_REDIS_MIN_REPLICAS={min_replicas}: {TASKS} tasks acknowledged, {gone + left} lost "
          f"({gone} records gone, {left} left unfinished), {rerun} run again; after the SIGKILL: promotion "
          f"{times['promoted']:.1f}s, API submits into the moved partitions {times['api']:.1f}s, every worker "
          f"heartbeating {times['heartbeats']:.1f}s, {len(first_start)} of {WORKERS} workers running the run's "
          f"tasks from the promoted replica {times['workers']:.1f}s (a later probe: each worker within "
          f"{max(probe_start.values()):.1f}s); {during} tasks started on the other masters during the failover")
    # Submits and completions waited for replicas exactly when asked to (on the masters that stayed,
    # and on the promoted one).
    waits = sum(int(reader.get_redis_connection(node).info("commandstats").get("cmdstat_wait", {}).get("calls", 0))
                for node in reader.get_primaries())
    assert (waits > 0) == bool(min_replicas), waits
    # The promoted replica had none of dtq's scripts (Redis does not replicate SCRIPT LOAD; it does
    # replicate FUNCTION LOAD, so the hot path's functions were there): the first EVALSHAs there
    # answered NOSCRIPT, and dtq loaded the scripts and sent those calls again.
    assert int(client(promoted[0].port).info("commandstats").get("cmdstat_script|load", {}).get("calls", 0)) > 0
    if min_replicas:
        assert gone + left == 0, f"{gone + left} acknowledged tasks lost although replicas confirmed them"
    watcher_client.close()
    reader.close()
