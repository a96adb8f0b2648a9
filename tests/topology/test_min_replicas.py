"""DTQ_REDIS_MIN_REPLICAS: an acknowledged write waits (WAIT, on the write's own connection) until
that many replicas have it. On a single node with no replica a submit answers 503
REDIS_REPLICATION_TIMEOUT within the WAIT timeout, having made the write, so a retry with the same
idempotency key returns that task; with a replica attached (`--replicaof`) submits succeed. A
master's own min-replicas-to-write refusal (NOREPLICAS) is a 503 too. A worker whose completions
are not confirmed warns, asks again and goes on."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from rest_framework.test import APIClient

import dtq_tasks  # noqa: F401 - registers the built-in task types in this process (the worker below)
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import ReplicationTimeout
from dtq_core.keys import Keys
from dtq_core.task import Outcome
from dtq_core.worker import store as store_module
from dtq_core.worker.executor import Completion
from dtq_core.worker.runtime import Worker
from dtq_core.worker.store import WorkerStore

from ..conftest import WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer
from ..redis_topologies import HOST, REPLICATION_ARGS, link_up, poll
from ..worker.support import fetch, partitions, store, until

WAIT_MS = 100


@pytest.fixture
def master(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "master", appendonly=False, args=REPLICATION_ARGS) as server:
        yield server


@pytest.fixture
def prefix() -> str:
    return f"dtqtest:{uuid4().hex[:12]}"


def attach_replica(directory: Path, master: RedisServer) -> RedisServer:
    replica = RedisServer(directory, appendonly=False, args=["--replicaof", HOST, str(master.port)]).start()
    try:
        poll(lambda: link_up(replica.port), timeout=10, what="the replica in sync")
        # A replica whose link has just come up does not always confirm the next writes within
        # WAIT_MS yet (seen here: a WAIT timing out right after the link was up): wait until it does.
        poll(lambda: replica_acked(master.port), timeout=10, what="the master to count the replica")
    except BaseException:
        replica.stop()  # not left running when the test fails here
        raise
    return replica


def replica_acked(port: int) -> bool:
    """Three writes in a row confirmed by the replica within WAIT_MS: it keeps up."""
    master = redis.Redis(port=port)
    for n in range(3):
        master.set("dtqtest:replica-probe", n)
        if int(master.execute_command("WAIT", 1, WAIT_MS)) < 1:
            return False
    master.delete("dtqtest:replica-probe")
    return True


def point_django_at(settings: Any, master: RedisServer, prefix: str, **more: Any) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": master.url, "KEY_PREFIX": prefix, "REDIS_MIN_REPLICAS": 1,
                    "REDIS_WAIT_TIMEOUT_MS": WAIT_MS, "ALLOW_ANONYMOUS_ADMIN": True, **more}


def submit(api: APIClient, body: Any, path: str = "/api/v1/tasks") -> Any:
    return api.post(path, json.dumps(body), content_type="application/json")


def test_a_submit_no_replica_confirms_is_a_quick_503_and_its_retry_returns_the_same_task(
        master: RedisServer, prefix: str, settings: Any, tmp_path: Path) -> None:
    point_django_at(settings, master, prefix)
    api = APIClient()
    started = time.monotonic()
    refused = submit(api, {"type": "dtq.echo", "payload": {"n": 1}, "idempotency_key": "order-1"})
    took = time.monotonic() - started
    assert refused.status_code == 503, refused.content
    error = refused.json()["error"]
    assert error["code"] == "REDIS_REPLICATION_TIMEOUT"
    assert "0 of the 1 replica(s)" in error["message"] and f"within {WAIT_MS} ms" in error["message"]
    assert "may or may not survive a failover" in error["message"]
    assert "same idempotency_key does not create a second task" in error["message"]
    assert took < 1.0, f"the 503 took {took:.2f}s"
    batch = submit(api, {"tasks": [{"type": "dtq.echo", "idempotency_key": "order-2"}]}, "/api/v1/tasks/batch")
    assert batch.status_code == 503 and batch.json()["error"]["code"] == "REDIS_REPLICATION_TIMEOUT"

    replica = attach_replica(tmp_path / "replica", master)
    try:
        again = submit(api, {"type": "dtq.echo", "payload": {"n": 1}, "idempotency_key": "order-1"})
        assert again.status_code == 200, again.content  # 200: the task the refused submit made
        batch = submit(api, {"tasks": [{"type": "dtq.echo", "idempotency_key": "order-2"}]}, "/api/v1/tasks/batch")
        assert batch.status_code == 200 and batch.json()["results"][0]["created"] is False
        tasks = api.get("/api/v1/tasks?limit=50").json()["results"]
        assert sorted(t["idempotency_key"] for t in tasks) == ["order-1", "order-2"]  # one task each
        assert again.json()["id"] in {t["id"] for t in tasks}
        fresh = submit(api, {"type": "dtq.echo"})
        assert fresh.status_code == 201, fresh.content
        # What the replica has is what was acknowledged.
        assert redis.Redis(port=replica.port).exists(Keys(prefix).task(fresh.json()["id"]))
    finally:
        replica.stop()


def test_an_operator_action_waits_for_replicas_on_its_last_write(master: RedisServer, prefix: str,
                                                                 tmp_path: Path) -> None:
    config = DtqConfig(redis_url=master.url, key_prefix=prefix, redis_min_replicas=1, redis_wait_timeout_ms=WAIT_MS)
    engine = Engine(config)
    replica = attach_replica(tmp_path / "replica", master)
    try:
        task = engine.tasks.enqueue("dtq.echo", queue="ops")
        assert engine.queues.pause("ops", Actor.cli())
    finally:
        replica.stop()
    # No replica now: the action is made on the master, and reported as not confirmed.
    with pytest.raises(ReplicationTimeout):
        engine.tasks.cancel(task.id, Actor.cli())
    assert engine.tasks.get(task.id)["status"] == "CANCELLED"
    assert engine.audit.list(limit=1).items[0]["action"] == "task.cancel"


def test_noreplicas_from_a_master_with_min_replicas_to_write_is_a_503(tmp_path: Path, prefix: str,
                                                                      settings: Any) -> None:
    with RedisServer(tmp_path / "strict", appendonly=False, args=["--min-replicas-to-write", "1"]) as strict:
        settings.DTQ = {**settings.DTQ, "REDIS_URL": strict.url, "KEY_PREFIX": prefix}
        api = APIClient()
        refused = submit(api, {"type": "dtq.echo"})
        assert refused.status_code == 503, refused.content
        error = refused.json()["error"]
        assert error["code"] == "REDIS_WRITE_FAILED"
        assert error["message"] == ("Redis refused the write; try again shortly (NOREPLICAS Not enough good "
                                    "replicas to write.)")
        ready = api.get("/ready")  # it answers, but refuses writes: not ready for traffic
        assert ready.status_code == 503 and "NOREPLICAS" in ready.content.decode()


def test_a_worker_whose_completions_are_not_confirmed_warns_asks_again_and_goes_on(
        master: RedisServer, prefix: str, tmp_path: Path) -> None:
    engine = Engine(DtqConfig(redis_url=master.url, key_prefix=prefix))  # submits without waiting
    env = worker_env(master.url, prefix, DTQ_REDIS_MIN_REPLICAS=1, DTQ_REDIS_WAIT_TIMEOUT_MS=50)
    worker = WorkerProcess(["--queues", "default", "--concurrency", "2"], env, tmp_path / "worker.log")
    try:
        first = engine.tasks.enqueue("dtq.echo", {"n": 1}).id
        wait_for(lambda: engine.tasks.get(first)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
        wait_for(lambda: "still not confirmed by 1 replica(s)" in worker.output(), timeout=30, message=worker.output)
        log = worker.output()
        assert "not confirmed by 1 replica(s) within 50 ms (WAIT answered 0): sending them again" in log
        assert worker.proc.poll() is None, log  # it goes on
        replica = attach_replica(tmp_path / "replica", master)
        try:
            shortfalls = log.count("not confirmed by")
            second = engine.tasks.enqueue("dtq.echo", {"n": 2}).id
            wait_for(lambda: engine.tasks.get(second)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
            assert worker.output().count("not confirmed by") == shortfalls, worker.output()
            assert redis.Redis(port=replica.port, decode_responses=True).hget(
                engine.keys.task(second), "status") == "SUCCEEDED"
        finally:
            replica.stop()
        assert "Traceback" not in worker.output()
    finally:
        worker.kill()


def test_a_worker_s_statistics_samples_wait_for_replicas_and_a_shortfall_is_logged_not_held(
        master: RedisServer, prefix: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "REWAITS", 0)  # completions: no asking again (speed only)
    # The samples (history, finished per minute, run times) leave the completion for the worker's
    # write once a second; with DTQ_REDIS_MIN_REPLICAS a WAIT follows that write as it follows a
    # completion. Without a replica to confirm it, the write stands on the master and is logged:
    # holding it back would hold every later sample of the partition back with it.
    config = DtqConfig(redis_url=master.url, key_prefix=prefix, redis_min_replicas=1, redis_wait_timeout_ms=WAIT_MS)
    engine = Engine(dataclasses.replace(config, redis_min_replicas=0))  # submits without WAIT
    (only,) = engine.registry.ensure("smp").all_tags
    began = time.time()

    def history(port: int) -> int:
        client = redis.Redis(port=port, decode_responses=True)
        return sum(int(client.hget(f"{engine.keys.history(only)}m:{m}", "dtq.echo|s") or 0)
                   for m in range(int(began // 60), int(time.time() // 60) + 1))

    async def complete(worker_store: WorkerStore, n: int) -> None:
        for i in range(n):
            engine.tasks.enqueue("dtq.echo", {"n": i}, queue="smp")
        rows = await fetch(worker_store, partitions(engine, "smp"), n)
        assert await worker_store.complete(
            [Completion(r, Outcome.SUCCEEDED, result_json="null", duration_s=0.01) for r in rows]) == ["SUCCEEDED"] * n

    async def run() -> None:
        worker_store = store(config)
        try:
            replica = attach_replica(tmp_path / "replica", master)
            try:
                await complete(worker_store, 3)
                with caplog.at_level(logging.WARNING, logger="dtq.worker"):
                    assert await worker_store.write_samples() == 1
                assert "statistics samples" not in caplog.text
                assert history(replica.port) == 3  # confirmed: the replica has them already
            finally:
                replica.stop()
            await complete(worker_store, 2)
            with caplog.at_level(logging.WARNING, logger="dtq.worker"):
                assert await worker_store.write_samples() == 1
            assert ("statistics samples of 1 partition(s) not confirmed by 1 replica(s) within "
                    f"{WAIT_MS} ms (WAIT answered 0): a failover now could lose them") in caplog.text
            assert history(master.port) == 5 and not worker_store.samples
            assert await worker_store.write_samples() == 0  # nothing held back to send again
            assert history(master.port) == 5
        finally:
            await worker_store.aclose()

    asyncio.run(run())


def test_a_draining_worker_writes_its_samples_though_no_replica_confirms_them(
        master: RedisServer, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store_module, "REWAITS", 0)  # completions: no asking again (speed only)
    plain = Engine(DtqConfig(redis_url=master.url, key_prefix=prefix))  # submits without WAIT
    config = DtqConfig(redis_url=master.url, key_prefix=prefix, redis_min_replicas=1, redis_wait_timeout_ms=50)
    (only,) = plain.registry.ensure("lag").all_tags
    began = time.time()
    first = [plain.tasks.enqueue("dtq.echo", {"n": n}, queue="lag").id for n in range(3)]
    worker = Worker(config, queues=["lag"], name=f"lag-{time.monotonic_ns()}")
    data = redis.Redis(port=master.port, decode_responses=True)

    def succeeded(ids: list[str]) -> bool:
        return all(plain.tasks.get(i)["status"] == "SUCCEEDED" for i in ids)

    def written() -> int:
        return sum(int(data.hget(f"{plain.keys.history(only)}m:{m}", "dtq.echo|s") or 0)
                   for m in range(int(began // 60), int(time.time() // 60) + 1))

    async def scenario() -> bool:
        running = asyncio.create_task(worker.run())
        try:
            await until(lambda: succeeded(first), "the first tasks")
            await until(lambda: written() == 3, "the loop's write")  # not confirmed: no replica
            second = [plain.tasks.enqueue("dtq.echo", {"n": n}, queue="lag").id for n in range(3, 5)]
            await until(lambda: succeeded(second), "the second tasks")
            worker.request_stop()  # as SIGTERM: the drain writes the samples
            assert await asyncio.wait_for(running, 20) == 0
            return bool(worker.store.samples)
        finally:
            if not running.done():
                running.cancel()

    assert asyncio.run(scenario()) is False  # none left behind
    assert written() == 5
