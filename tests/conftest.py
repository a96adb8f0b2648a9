"""Shared fixtures: a throwaway redis-server per test process, one key prefix per test, an
Engine on a FakeClock, settings pointing Django at both, and real worker processes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.conf import settings

from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine

from .redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent

# Tests import dtq_site.asgi with DEBUG off, which refuses dtq's public development key; the suite
# signs its sessions with a key of its own instead (tests/site/test_secret_key.py covers the refusal).
settings.SECRET_KEY = "dtq-test-suite-" + "0123456789abcdef" * 4


# DTQ_TEST_TOPOLOGY=cluster|sentinel runs the same tests on a local Redis Cluster (3 masters,
# 3 replicas) or behind Sentinel (a master, 2 replicas, 3 sentinels): `make test` does so for the
# representative subset listed in Makefile (TOPOLOGY_TESTS). Unset: one redis-server.
TOPOLOGY = os.environ.get("DTQ_TEST_TOPOLOGY", "single")


class TopologyServer:
    """What tests use of redis_server (its URL), for a cluster or a Sentinel setup."""

    def __init__(self, setup: Any) -> None:
        self.setup = setup
        self.url: str = setup.url


@pytest.fixture
def count_writes(monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[int]]:
    """Call it to start counting redis-py's writes to Redis (one per round trip: a pipeline or a
    script call is one send_packed_command); it returns the list that gets one item per write."""
    import redis.connection

    def start() -> list[int]:
        sends: list[int] = []
        original = redis.connection.Connection.send_packed_command

        def counting(self: Any, command: Any, check_health: bool = True) -> None:
            sends.append(1)
            original(self, command, check_health)

        monkeypatch.setattr(redis.connection.Connection, "send_packed_command", counting)
        return sends

    return start


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # A throwaway redis-server on a free port: never a user's Redis, and tests may kill it.
    if TOPOLOGY != "single":
        from .redis_topologies import ClusterSetup, SentinelSetup

        kind = {"cluster": ClusterSetup, "sentinel": SentinelSetup}[TOPOLOGY]
        setup = kind(tmp_path_factory.mktemp(TOPOLOGY)).start()
        try:
            yield TopologyServer(setup)
        finally:
            setup.stop()
        return
    with RedisServer(tmp_path_factory.mktemp("redis"), appendonly=True) as server:
        yield server


@pytest.fixture(scope="session")
def redis_client(redis_server: Any) -> redis.Redis:
    if TOPOLOGY == "single":
        return redis.Redis.from_url(redis_server.url, decode_responses=True)
    from dtq_core.connection import cluster_client, sync_client

    config = DtqConfig(redis_url=redis_server.url)
    return cluster_client(config) if TOPOLOGY == "cluster" else sync_client(config)  # type: ignore[return-value]


@pytest.fixture
def key_prefix(redis_client: redis.Redis) -> Iterator[str]:
    prefix = f"dtqtest:{uuid4().hex[:12]}"
    yield prefix
    try:
        for key in redis_client.scan_iter(match=f"{prefix}:*", count=1000):
            redis_client.unlink(key)
    except redis.RedisError:
        pass  # a test that killed its Redis cleans nothing


@pytest.fixture
def config(redis_server: RedisServer, key_prefix: str) -> DtqConfig:
    return DtqConfig(redis_url=redis_server.url, key_prefix=key_prefix)


@pytest.fixture
def engine(config: DtqConfig) -> Engine:
    """An engine on a FakeClock: tests move time with engine.clock.advance(30)."""
    return Engine(config, clock=FakeClock(start_ms=int(time.time() * 1000)))


@pytest.fixture(autouse=True)
def dtq_settings(settings: Any, request: pytest.FixtureRequest) -> Any:
    """Point Django at the test Redis with this test's key prefix (never at 6379)."""
    if "redis_server" in request.fixturenames or "engine" in request.fixturenames \
            or "live_engine" in request.fixturenames:
        server = request.getfixturevalue("redis_server")
        prefix = request.getfixturevalue("key_prefix")
        settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": prefix}
    else:
        settings.DTQ = {**settings.DTQ, "REDIS_URL": "redis://127.0.0.1:1/0"}
    return settings


@pytest.fixture
def anonymous_admin(dtq_settings: Any) -> Any:
    """Turn on DTQ_ALLOW_ANONYMOUS_ADMIN, as an operator must, for tests that call destructive
    endpoints the way a script does: no key, no session (audited as api:anonymous)."""
    dtq_settings.DTQ = {**dtq_settings.DTQ, "ALLOW_ANONYMOUS_ADMIN": True}
    return dtq_settings


@pytest.fixture
def live_engine(dtq_settings: Any) -> Engine:
    """The process-wide engine (the one views and dtq_tasks use), on the system clock."""
    from dtq_core.conf import get_engine

    return get_engine()


def worker_env(server_url: str, prefix: str, **overrides: Any) -> dict[str, str]:
    env = dict(os.environ)
    env.update({"DTQ_REDIS_URL": server_url, "DTQ_KEY_PREFIX": prefix, "DJANGO_SETTINGS_MODULE": "dtq_site.settings",
                "PYTHONUNBUFFERED": "1"})
    env.update({k: str(v) for k, v in overrides.items()})
    return env


class WorkerProcess:
    """A real `manage.py runworker_dtq` process."""

    def __init__(self, args: list[str], env: dict[str, str], log: Path, *,
                 preexec_fn: Callable[[], Any] | None = None) -> None:
        """preexec_fn: run in the child before the worker starts (e.g. to change its group)."""
        self.log_path = log
        self._log = open(log, "wb")  # noqa: SIM115 - closed in wait()/kill()
        self.proc = subprocess.Popen([sys.executable, "manage.py", "runworker_dtq", *args], cwd=ROOT,
                                     env=env, stdout=self._log, stderr=subprocess.STDOUT, preexec_fn=preexec_fn)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait(self, timeout: float = 60) -> int:
        code = self.proc.wait(timeout)
        self._log.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self._log.close()


@pytest.fixture
def start_worker(redis_server: RedisServer, key_prefix: str, tmp_path: Path
                 ) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str, **env_overrides: Any) -> WorkerProcess:
        env = worker_env(redis_server.url, key_prefix, **env_overrides)
        proc = WorkerProcess(list(args), env, tmp_path / f"worker-{len(started)}.log")
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.kill()


def next_millisecond(engine: Engine) -> None:
    """Return once engine's clock has passed the millisecond it reads now. Listings ordered by
    creation time (in ms) break ties by the random id: what a test submits one after another must
    not share a millisecond if it is to be listed in submit order."""
    start = engine.clock.now_ms()
    wait_for(lambda: engine.clock.now_ms() > start, timeout=1.0, interval=0.0005,
             message="the clock did not move for a second")


def wait_for(predicate: Callable[[], Any], timeout: float = 15.0, interval: float = 0.02,
             message: str | Callable[[], str] = "") -> Any:
    """Poll until predicate() is truthy; fail with `message` (or its result) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            text = message() if callable(message) else message
            raise AssertionError(text or f"condition not met within {timeout}s")
        time.sleep(interval)
