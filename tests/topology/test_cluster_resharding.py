"""A queue's slot moving between Redis Cluster masters while dtq runs (docs/deployment.md#resharding).

Each script call declares, beside its partition's prefix, a key of the same slot that never exists
(dtq_core/scripts/__init__.py, the slot guard): while the slot migrates, Redis answers TRYAGAIN on
both masters, so no script runs until the slot has moved. Before, the prefix (never a real key)
made the source answer ASK, and every script ran on the importing master over empty keys while the
partition's data was still on the source: the queue split in two, and `redis-cli --cluster
reshard` stopped at "Target key exists".
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from dtq_core.config import DtqConfig
from dtq_core.connection import cluster_client
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import RedisUnavailable
from dtq_core.redis_errors import redis_trouble

from ..conftest import WorkerProcess, wait_for, worker_env
from ..redis_topologies import ClusterSetup, client, free_ports, poll

WORKER_ENV = {"DTQ_VISIBILITY_TIMEOUT_S": 3, "DTQ_STALE_CLAIM_S": 3, "DTQ_HEARTBEAT_INTERVAL_S": 0.5,
              "DTQ_SCHEDULER_LOCK_TTL_S": 2}


def _start_moving(src_port: int, dst_port: int, slot: int) -> None:
    src, dst = client(src_port), client(dst_port)
    dst.execute_command("CLUSTER SETSLOT", slot, "IMPORTING", src.execute_command("CLUSTER MYID"))
    src.execute_command("CLUSTER SETSLOT", slot, "MIGRATING", dst.execute_command("CLUSTER MYID"))


def _migrate_keys(src_port: int, dst_port: int, slot: int) -> None:
    """What `redis-cli --cluster reshard` does with a slot's keys, ten at a time. No REPLACE: a key
    the target holds already (BUSYKEY) is a split queue, and fails the test."""
    src = client(src_port)
    while keys := src.execute_command("CLUSTER GETKEYSINSLOT", slot, 10):
        src.execute_command("MIGRATE", "127.0.0.1", dst_port, "", 0, 5000, "KEYS", *keys)


def _finish_moving(setup: ClusterSetup, dst_port: int, slot: int) -> None:
    owner = client(dst_port).execute_command("CLUSTER MYID")
    for master in setup.masters():
        client(master.port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", owner)


def _move_slot(setup: ClusterSetup, slot: int, src_port: int, dst_port: int, between: Callable[[], None]) -> None:
    _start_moving(src_port, dst_port, slot)
    between()
    _migrate_keys(src_port, dst_port, slot)
    _finish_moving(setup, dst_port, slot)


def _queue_slot(engine: Engine, rc: redis.cluster.RedisCluster, setup: ClusterSetup,
                queue: str) -> tuple[int, int, int]:
    """(slot, its master's port, another master's port) of the queue's partition."""
    layout = engine.registry.get(queue, fresh=True)
    assert layout is not None
    prefix = engine.keys.partition(layout.tags[0])
    src_port = int(rc.get_node_from_key(prefix).port)
    return key_slot(prefix.encode()), src_port, next(m.port for m in setup.masters() if m.port != src_port)


def test_a_submit_while_its_queue_slot_migrates_is_refused_whole_and_the_queue_stays_one(
        fresh_cluster: ClusterSetup) -> None:
    config = DtqConfig(redis_url=fresh_cluster.url, key_prefix="mig", accept_unknown_types=True)
    rc = cluster_client(config)
    try:
        engine = Engine(config, client=rc)
        before = engine.tasks.enqueue("dtq.echo", queue="q").id
        slot, src_port, dst_port = _queue_slot(engine, rc, fresh_cluster, "q")
        refused: list[BaseException] = []

        def submit() -> None:
            started = time.monotonic()
            try:
                with redis_trouble():
                    engine.tasks.enqueue("dtq.echo", queue="q")
            except RedisUnavailable as exc:
                refused.append(exc)
            assert time.monotonic() - started < 2.0  # TRYAGAIN is waited out briefly, then refused
            # An operator's action (a script sent through redis-py's own cluster client) likewise.
            with pytest.raises(RedisUnavailable), redis_trouble():
                engine.queues.pause("q", Actor.user("ops", source="api", request_id="r1"))

        _move_slot(fresh_cluster, slot, src_port, dst_port, submit)
        assert len(refused) == 1 and refused[0].http_status == 503
        rc.nodes_manager.initialize()
        after = engine.tasks.enqueue("dtq.echo", queue="q").id
        assert engine.queues.get("q")["depth"]["normal"] == 2 and engine.queues.get("q")["paused"] is False
        assert sorted(i["task_id"] for i in engine.queues.waiting("q", limit=10).items) == sorted([before, after])
        assert client(src_port).execute_command("CLUSTER COUNTKEYSINSLOT", slot) == 0
    finally:
        rc.close()


def test_a_task_that_finishes_while_its_queue_slot_migrates_is_completed_once(
        fresh_cluster: ClusterSetup, tmp_path: Path) -> None:
    config = DtqConfig(redis_url=fresh_cluster.url, key_prefix="migw", accept_unknown_types=True)
    rc = cluster_client(config)
    worker = WorkerProcess(["--name", "w0", "--concurrency", "2"], worker_env(fresh_cluster.url, "migw", **WORKER_ENV),
                           tmp_path / "worker.log")
    try:
        engine = Engine(config, client=rc)
        warm = engine.tasks.enqueue("dtq.echo", queue="q").id
        wait_for(lambda: engine.tasks.get(warm)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
        task = engine.tasks.enqueue("dtq.sleep", {"seconds": 1}, queue="q").id
        wait_for(lambda: engine.tasks.get(task)["status"] == "RUNNING", timeout=10, message=worker.output)
        slot, src_port, dst_port = _queue_slot(engine, rc, fresh_cluster, "q")
        _start_moving(src_port, dst_port, slot)
        # The handler ends while the slot migrates: the worker's scripts on that slot are refused
        # (TRYAGAIN; redis-py's "TTL exhausted" once its own retries run out), none runs on the
        # importing master, and the record still says RUNNING there on the source.
        wait_for(lambda: "TryAgainError" in worker.output() or "TTL exhausted" in worker.output(), timeout=10,
                 message=worker.output)
        assert engine.tasks.get(task)["status"] == "RUNNING"
        _migrate_keys(src_port, dst_port, slot)
        _finish_moving(fresh_cluster, dst_port, slot)
        rc.nodes_manager.initialize()
        wait_for(lambda: engine.tasks.get(task)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
        # Past a visibility timeout: a completion lost in the move would be reclaimed and run again.
        assert not poll_for(lambda: engine.tasks.get(task)["attempt"] != 1, seconds=4)
        assert engine.tasks.get(task)["status"] == "SUCCEEDED"
    finally:
        worker.kill()
        rc.close()


def poll_for(condition: Callable[[], bool], *, seconds: float) -> bool:
    """Whether condition became true within seconds (for what must NOT happen in that time)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_every_task_submitted_during_a_reshard_runs_and_the_reshard_completes(
        fresh_cluster: ClusterSetup, tmp_path: Path) -> None:
    # redis-cli moves slots of the queue's master, the queue's among them, to another master while
    # a producer submits and a worker runs the tasks.
    config = DtqConfig(redis_url=fresh_cluster.url, key_prefix="rs", accept_unknown_types=True)
    rc = cluster_client(config)
    worker = WorkerProcess(["--name", "w0", "--concurrency", "8"], worker_env(fresh_cluster.url, "rs", **WORKER_ENV),
                           tmp_path / "worker.log")
    submitted: list[str] = []
    refused = 0
    stop = threading.Event()
    try:
        engine = Engine(config, client=rc)
        warm = engine.tasks.enqueue("dtq.echo", queue="q").id
        wait_for(lambda: engine.tasks.get(warm)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
        slot, src_port, dst_port = _queue_slot(engine, rc, fresh_cluster, "q")
        # redis-cli takes a source's slots in ascending order: moving as many as reach the queue's
        # slot moves it (a whole master's 5,461 took over a minute on 2 cores running other tests).
        first, _last = next((int(r[0]), int(r[1])) for r in client(src_port).execute_command("CLUSTER SLOTS")
                            if int(r[2][1]) == src_port and int(r[0]) <= slot <= int(r[1]))
        moved = slot - first + 1

        def produce() -> None:
            nonlocal refused
            n = 0
            while not stop.is_set():
                try:
                    with redis_trouble():
                        submitted.append(engine.tasks.enqueue("dtq.echo", {"n": n}, queue="q").id)
                except RedisUnavailable:
                    refused += 1  # not acknowledged: the producer would send it again
                n += 1
                stop.wait(0.002)

        producer = threading.Thread(target=produce)
        producer.start()
        poll(lambda: len(submitted) >= 50, timeout=10, what="submits before the reshard")
        cli = shutil.which("redis-cli")
        assert cli
        src_id = client(src_port).execute_command("CLUSTER MYID")
        dst_id = client(dst_port).execute_command("CLUSTER MYID")
        done = subprocess.run([cli, "--cluster", "reshard", f"127.0.0.1:{src_port}", "--cluster-from", src_id,
                               "--cluster-to", dst_id, "--cluster-slots", str(moved), "--cluster-yes"],
                              capture_output=True, text=True, timeout=150, check=False)
        count = len(submitted)
        poll(lambda: len(submitted) >= count + 50, timeout=10, what="submits after the reshard")
        stop.set()
        producer.join(10)
        assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-1500:]
        assert _queue_slot(engine, rc, fresh_cluster, "q")[1] == dst_port

        def unfinished() -> list[tuple[str, str]]:
            return [(i, s) for i in submitted if (s := engine.tasks.get(i)["status"]) != "SUCCEEDED"]

        wait_for(lambda: not unfinished(), timeout=30, message=lambda: f"{unfinished()[:5]} {worker.output()[-3000:]}")
        assert engine.queues.get("q")["depth"] == {"high": 0, "normal": 0, "low": 0}
    finally:
        stop.set()
        worker.kill()
        rc.close()


def test_submits_wait_for_a_slot_moving_to_a_newly_added_master_and_resume_once_it_is_there(
        fresh_cluster: ClusterSetup) -> None:
    config = DtqConfig(redis_url=fresh_cluster.url, key_prefix="newnode", accept_unknown_types=True)
    rc = cluster_client(config)
    try:
        engine = Engine(config, client=rc)
        first = engine.tasks.enqueue("dtq.echo", queue="q").id
        slot, src_port, _ = _queue_slot(engine, rc, fresh_cluster, "q")
        new = fresh_cluster._node(len(fresh_cluster.servers), *free_ports(2))
        fresh_cluster.servers.append(new)
        new.start()
        cli = shutil.which("redis-cli")
        assert cli
        joined = subprocess.run([cli, "--cluster", "add-node", f"127.0.0.1:{new.port}", f"127.0.0.1:{src_port}"],
                                capture_output=True, text=True, timeout=60, check=False)
        assert joined.returncode == 0, joined.stdout
        poll(lambda: client(new.port).cluster("info")["cluster_state"] == "ok", timeout=20, what="the new master ok")
        new_id = client(new.port).execute_command("CLUSTER MYID")
        poll(lambda: new_id in str(client(src_port).execute_command("CLUSTER", "NODES")), timeout=20,
             what="the new master known to the old one")
        _start_moving(src_port, new.port, slot)
        _migrate_keys(src_port, new.port, slot)
        # Every key is on the new master, which owns no slot yet (not in the slot map): a script
        # is ASKed there, and refused (TRYAGAIN) until the slot has moved, rather than failing on
        # a node it cannot find.
        with pytest.raises(RedisUnavailable), redis_trouble():
            engine.tasks.enqueue("dtq.echo", queue="q")
        _finish_moving(fresh_cluster, new.port, slot)
        rc.nodes_manager.initialize()
        second = engine.tasks.enqueue("dtq.echo", queue="q").id
        assert [i["task_id"] for i in engine.queues.waiting("q", limit=10).items] == [first, second]
    finally:
        rc.close()
