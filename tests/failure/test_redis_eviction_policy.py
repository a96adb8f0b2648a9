"""Redis's maxmemory-policy must be noeviction (docs/deployment.md): with any other, a full Redis
evicts task records, streams and locks, tasks lost without a word. dtq checks it where it
connects, against real redis-servers started with an evicting policy: the worker logs an ERROR
at start (and keeps running), /ready carries a warning, `manage.py check --deploy` reports it.
Managed Redis that refuses CONFIG is read through INFO; when both are refused, dtq says it could
not verify."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.core.checks import run_checks
from django.test import Client

from dtq_core.checks import EVICTING_POLICY, POLICY_UNVERIFIED
from dtq_core.conf import get_engine
from dtq_core.keys import Keys

from ..conftest import ROOT, WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer
from .support import env, registered, statuses

pytestmark = pytest.mark.slow

EVICTING = ["--maxmemory-policy", "allkeys-lru"]
CONFIG_DISABLED = ["--rename-command", "CONFIG", ""]  # as managed Redis services do


@pytest.fixture
def start_redis(tmp_path: Path, settings: Any) -> Iterator[Any]:
    """Start a redis-server of this test's own with extra options; Django's settings point at it."""
    servers: list[RedisServer] = []

    def start(args: list[str], user: str = "") -> tuple[RedisServer, Keys, str]:
        server = RedisServer(tmp_path / f"redis{len(servers)}", appendonly=False, args=args).start()
        servers.append(server)
        url = server.url
        if user:
            # An ACL user that may run everything dtq needs, but neither CONFIG nor INFO.
            redis.Redis(port=server.port).acl_setuser(user, enabled=True, passwords=["+pw"], commands=[
                "+@all", "-config", "-info"], keys=["*"], channels=["*"])
            url = f"redis://{user}:pw@127.0.0.1:{server.port}/0"
        prefix = f"dtqtest:{uuid4().hex[:12]}"
        settings.DTQ = {**settings.DTQ, "REDIS_URL": url, "KEY_PREFIX": prefix}
        return server, Keys(prefix), url

    yield start
    for server in servers:
        server.stop()


def _lines(output: str, level: str) -> list[str]:
    return [line for line in output.splitlines() if f" {level} " in f" {line} " and "maxmemory-policy" in line]


@pytest.mark.parametrize("args", [EVICTING, EVICTING + CONFIG_DISABLED], ids=["config", "info-fallback"])
def test_a_worker_on_an_evicting_redis_logs_an_error_at_start_and_runs(start_redis: Any, tmp_path: Path,
                                                                       args: list[str]) -> None:
    # Decision (docs/deployment.md): warn loudly, do not refuse; the worker runs its tasks.
    server, keys, url = start_redis(args)
    worker = WorkerProcess(["--name", "a", "--queues", "out"], worker_env(url, keys.prefix, **env()),
                           tmp_path / "worker.log")
    try:
        data = redis.Redis.from_url(url, decode_responses=True)
        wait_for(lambda: registered(data, keys, "a") and _lines(worker.output(), "ERROR"), timeout=30,
                 message=worker.output)
        [line] = _lines(worker.output(), "ERROR")
        assert "maxmemory-policy is allkeys-lru, not noeviction" in line
        task_id = get_engine().tasks.enqueue("failure.work", queue="out").id
        wait_for(lambda: statuses(data, keys, [task_id]) == ["SUCCEEDED"], timeout=30, message=worker.output)
    finally:
        worker.kill()


def test_a_worker_on_a_noeviction_redis_says_nothing_about_it(start_redis: Any, tmp_path: Path) -> None:
    server, keys, url = start_redis([])
    worker = WorkerProcess(["--name", "a", "--queues", "out"], worker_env(url, keys.prefix, **env()),
                           tmp_path / "worker.log")
    try:
        data = redis.Redis.from_url(url, decode_responses=True)
        task_id = get_engine().tasks.enqueue("failure.work", queue="out").id
        wait_for(lambda: statuses(data, keys, [task_id]) == ["SUCCEEDED"], timeout=30, message=worker.output)
        assert "maxmemory-policy" not in worker.output()
    finally:
        worker.kill()


def test_a_worker_that_cannot_read_the_policy_says_it_could_not_verify(start_redis: Any, tmp_path: Path) -> None:
    server, keys, url = start_redis(EVICTING, user="dtq")
    worker = WorkerProcess(["--name", "a", "--queues", "out"], worker_env(url, keys.prefix, **env()),
                           tmp_path / "worker.log")
    try:
        data = redis.Redis.from_url(url, decode_responses=True)
        wait_for(lambda: registered(data, keys, "a") and _lines(worker.output(), "WARNING"), timeout=30,
                 message=worker.output)
        [line] = _lines(worker.output(), "WARNING")
        assert "could not verify" in line and not _lines(worker.output(), "ERROR")
    finally:
        worker.kill()


@pytest.mark.parametrize("args", [EVICTING, EVICTING + CONFIG_DISABLED], ids=["config", "info-fallback"])
def test_ready_warns_about_an_evicting_policy_until_it_is_fixed(start_redis: Any, args: list[str]) -> None:
    # Still 200: the API serves, and a 503 would drop every replica out of rotation at once.
    server, _, _ = start_redis(args)
    response = Client().get("/ready")
    assert response.status_code == 200
    body = response.json()
    assert body["status"] == "ready"
    [warning] = body["warnings"]
    assert warning["code"] == "REDIS_EVICTION_POLICY" and warning["maxmemory_policy"] == "allkeys-lru"
    assert "not noeviction" in warning["message"]
    admin = redis.Redis(port=server.port)
    if CONFIG_DISABLED[0] not in args:
        admin.config_set("maxmemory-policy", "noeviction")
        assert Client().get("/ready").json() == {"status": "ready"}


def test_ready_says_when_it_could_not_verify_the_policy(start_redis: Any) -> None:
    start_redis(EVICTING, user="dtq")
    response = Client().get("/ready")
    assert response.status_code == 200
    [warning] = response.json()["warnings"]
    assert warning["code"] == "REDIS_EVICTION_POLICY" and warning["maxmemory_policy"] is None
    assert warning["message"].startswith("could not verify")


@pytest.mark.parametrize(("args", "user", "expected"), [
    (EVICTING, "", EVICTING_POLICY),
    (EVICTING + CONFIG_DISABLED, "", EVICTING_POLICY),
    (EVICTING, "dtq", POLICY_UNVERIFIED),
    ([], "", None),
], ids=["evicting", "info-fallback", "unverifiable", "noeviction"])
def test_the_deploy_check_reports_the_policy(start_redis: Any, args: list[str], user: str,
                                             expected: str | None) -> None:
    start_redis(args, user=user)
    found = {m.id for m in run_checks(tags=["dtq"], include_deployment_checks=True)}
    assert found & {EVICTING_POLICY, POLICY_UNVERIFIED} == ({expected} if expected else set())
    # A deploy check only: commands such as migrate do not connect to Redis for it.
    assert not {m.id for m in run_checks(tags=["dtq"])} & {EVICTING_POLICY, POLICY_UNVERIFIED}


def test_manage_py_check_deploy_names_the_policy(start_redis: Any) -> None:
    server, keys, url = start_redis(EVICTING)
    proc = subprocess.run([sys.executable, "manage.py", "check", "--deploy"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=worker_env(url, keys.prefix))
    assert f"({EVICTING_POLICY}) Redis's maxmemory-policy is allkeys-lru, not noeviction" in proc.stderr
