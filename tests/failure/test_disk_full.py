"""A full disk under Redis, injected for real: Redis's directory is a small tmpfs that the test
fills with a file until the kernel answers ENOSPC, then frees. And its sibling, Redis at
`maxmemory`, which refuses writes the same way."""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.test import Client

from dtq_core.connection import write_refused
from dtq_core.keys import Keys

from ..conftest import WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer
from .support import TmpfsMount, effects, env, started, statuses, task

pytestmark = pytest.mark.slow


@pytest.fixture
def full_disk_redis(tmp_path: Path, settings: Any) -> Iterator[tuple[RedisServer, Keys, Path]]:
    """A redis-server (AOF on) whose directory is a tmpfs of its own, Django pointed at it."""
    mount = TmpfsMount(tmp_path / "redis", "16m")
    mount.mount()
    server = RedisServer(mount.path, appendonly=True)
    prefix = f"dtqtest:{uuid4().hex[:12]}"
    try:
        server.start()
        settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": prefix}
        yield server, Keys(prefix), mount.path
    finally:
        server.stop()
        mount.close()


def _fill(directory: Path, limit_bytes: int) -> Path:
    """Write a file until the filesystem is full (ENOSPC), at most limit_bytes."""
    filler = directory / "filler"
    written = 0
    with open(filler, "wb", buffering=0) as out:
        for chunk in (1 << 20, 1 << 12, 1 << 9):
            while written < limit_bytes:
                try:
                    written += out.write(b"\0" * chunk)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    return filler


def _submit(client: Client, **body: Any) -> Any:
    return client.post("/api/v1/tasks", {"type": "failure.work", "queue": "disk", **body},
                       content_type="application/json")


def test_a_full_disk_fails_submits_with_503_loses_nothing_acknowledged_and_recovers(
        full_disk_redis: tuple[RedisServer, Keys, Path], tmp_path: Path) -> None:
    # It should survive: every task the API acknowledged, through the full disk and a restart
    # of Redis from its AOF afterwards. While the disk is full, submits answer 503 with a code
    # (never a 500); once space returns, new submits succeed and the earlier tasks run.
    server, keys, directory = full_disk_redis
    client = Client()
    rc = redis.Redis.from_url(server.url, decode_responses=True)
    worker = WorkerProcess(["--name", "w", "--queues", "disk"], worker_env(server.url, keys.prefix, **env()),
                           tmp_path / "w.log")
    try:
        wait_for(lambda: rc.zscore(keys.workers(), "w") is not None, timeout=30, message=worker.output)
        acked = [_submit(client, payload={"seconds": 0}).json()["id"]]
        wait_for(lambda: statuses(rc, keys, acked) == ["SUCCEEDED"], timeout=15, message=worker.output)
        # Its handler writes to Redis after the disk filled: refused, so that attempt must retry.
        writer = _submit(client, type="failure.write_late", payload={"by_attempt": {"1": 2, "2": 0}}).json()["id"]
        acked.append(writer)
        wait_for(lambda: started(rc, keys, writer), timeout=15, message=worker.output)
        # Due while the disk is full: they must run once it has space again.
        delayed = [_submit(client, payload={"seconds": 0}, delay_seconds=2).json()["id"] for _ in range(5)]
        acked += delayed

        filler = _fill(directory, 64 << 20)
        refused: list[Any] = []
        deadline = time.monotonic() + 20
        for _ in range(400):  # submit until Redis refuses (it acknowledges until its AOF write fails)
            response = _submit(client, payload={"seconds": 0})
            assert response.status_code in (201, 503), (response.status_code, response.content)
            if response.status_code == 201:
                acked.append(response.json()["id"])
            else:
                refused.append(response.json()["error"])
                break
            if time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert refused, "Redis kept acknowledging writes on a full disk"
        assert refused[0]["code"] == "REDIS_WRITE_FAILED", refused
        assert "no space left" in refused[0]["message"].lower(), refused
        time.sleep(3)  # the delayed tasks fall due, and the writer's write is refused, while the disk is full
        again = _submit(client, payload={"seconds": 0})
        assert again.status_code == 503 and again.json()["error"]["code"] == "REDIS_WRITE_FAILED"
        # Redis refuses even PING meanwhile: /ready says so (a 503, not a 500); reads still work.
        ready = client.get("/ready")
        assert ready.status_code == 503 and ready.json()["error"]["code"] == "REDIS_WRITE_FAILED", ready.content
        assert client.get(f"/api/v1/tasks/{acked[0]}").json()["status"] == "SUCCEEDED"
        assert worker.proc.poll() is None, worker.output()

        filler.unlink()
        # Redis retries its AOF write every second and takes writes again once it lands.
        def accepted() -> bool:
            response = _submit(client, payload={"seconds": 0})
            assert response.status_code in (201, 503), (response.status_code, response.content)
            if response.status_code == 201:
                acked.append(response.json()["id"])
            return response.status_code == 201

        wait_for(accepted, timeout=20, interval=0.2)
        assert client.get("/ready").status_code == 200
        wait_for(lambda: all(s == "SUCCEEDED" for s in statuses(rc, keys, acked)), timeout=30,
                 message=lambda: f"{dict(zip(acked, statuses(rc, keys, acked), strict=True))}\n{worker.output()}")
    finally:
        worker.kill()
    # Nothing acknowledged was lost, in memory or on disk: restart Redis from its AOF.
    rc.close()
    server.stop()
    server.start()
    rc = redis.Redis.from_url(server.url, decode_responses=True)
    assert statuses(rc, keys, acked) == ["SUCCEEDED"] * len(acked)
    assert effects(rc, keys) == {writer: 1}
    written = task(rc, keys, writer)
    assert written["attempt"] == "2" and "No space left on device" in written["errors"], written
    rc.close()


def test_redis_at_maxmemory_refuses_writes_with_503_and_workers_retry_them(tmp_path: Path, settings: Any) -> None:
    # Redis at `maxmemory` (noeviction) refuses writes with OOM as a full disk does with MISCONF:
    # the API answers 503 REDIS_WRITE_FAILED, a handler's refused write (a pipeline's error wraps
    # Redis's reply) is retryable, and raising the limit lets writes through again.
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    try:
        prefix = f"dtqtest:{uuid4().hex[:12]}"
        settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": prefix}
        client = Client()
        rc = redis.Redis.from_url(server.url, decode_responses=True)
        acked = _submit(client, payload={"seconds": 0}).json()["id"]
        rc.config_set("maxmemory-policy", "noeviction")
        rc.config_set("maxmemory", int(rc.info("memory")["used_memory"]) - 1024)
        refused = _submit(client, payload={"seconds": 0})
        assert refused.status_code == 503, refused.content
        assert refused.json()["error"]["code"] == "REDIS_WRITE_FAILED"
        assert "OOM" in refused.json()["error"]["message"]
        with pytest.raises(redis.ResponseError) as caught:
            rc.pipeline(transaction=False).hincrby(f"{prefix}:testlog:effects", "x", 1).execute()
        assert write_refused(caught.value), caught.value
        assert not write_refused(redis.ResponseError("WRONGTYPE Operation against a key holding the wrong kind"))
        rc.config_set("maxmemory", 0)
        assert _submit(client, payload={"seconds": 0}).status_code == 201
        assert statuses(rc, Keys(prefix), [acked]) == ["QUEUED"]
        rc.close()
    finally:
        server.stop()
