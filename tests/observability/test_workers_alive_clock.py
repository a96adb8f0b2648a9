"""dtq_workers_alive counts live workers whatever the API host's clock says: workers stamp their
heartbeats on Redis's clock (docs/failure-modes.md, clock skew), so /metrics judges them on
Redis's TIME, and every API replica reports the same value (docs/observability.md)."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from dtq_core.clock import redis_time_ms
from dtq_core.engine import Engine
from dtq_core.keys import Keys
from dtq_core.metrics import count_alive

from ..browser.server import ConsoleServer
from ..conftest import WorkerProcess, wait_for
from ..redis_server import RedisServer
from .conftest import Scrape, parse

LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
                        + sorted(Path("/usr/lib").glob("faketime/libfaketime.so.1"))), None)


def workers_alive(base_url: str) -> float | None:
    with urllib.request.urlopen(base_url + "/metrics", timeout=10) as response:
        samples = parse(response.read().decode())
    return next((v for _, v in samples.get("dtq_workers_alive", [])), None)


def test_alive_is_judged_on_redis_time() -> None:
    now = redis_time_ms((1_700_000_100, 250_000))
    assert now == 1_700_000_100_250
    beats = [("fresh", now - 1_000.0), ("edge", now - 2_000.0), ("silent", now - 2_001.0)]
    assert count_alive(beats, now_ms=now, alive_window_ms=2_000) == 2


@pytest.mark.skipif(LIBFAKETIME is None, reason="libfaketime not found: apt-get install faketime")
def test_a_live_worker_is_alive_on_every_api_replica_whatever_its_host_clock(
        tmp_path: Path, redis_server: RedisServer, key_prefix: str, redis_client: redis.Redis,
        start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--name", "alive", "--queues", "default")
    wait_for(lambda: redis_client.zscore(Keys(key_prefix).workers(), "alive") is not None, timeout=30,
             message=worker.output)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    on_time = ConsoleServer(tmp_path / "a", redis_server.url, key_prefix).start()
    # A second API replica on a host whose clock runs 60 s ahead (no NTP), as the clock-skew
    # failure mode describes for other hosts.
    ahead = ConsoleServer(tmp_path / "b", redis_server.url, key_prefix, LD_PRELOAD=str(LIBFAKETIME),
                          FAKETIME="+60s", FAKETIME_DONT_FAKE_MONOTONIC="1").start()
    try:
        assert worker.proc.poll() is None
        assert workers_alive(on_time.url) == 1
        # It should not report the healthy worker dead: DtqWorkersGone would page for nothing.
        assert workers_alive(ahead.url) == 1, ahead.log()[-2000:]
    finally:
        on_time.stop()
        ahead.stop()


def test_a_heartbeat_on_redis_time_counts_though_this_host_runs_ahead(
        live_engine: Engine, scrape: Callable[..., Scrape], monkeypatch: pytest.MonkeyPatch) -> None:
    # A worker's heartbeat, stamped on Redis's clock as workers do.
    beat = redis_time_ms(live_engine.client.execute_command("TIME"))
    live_engine.client.zadd(live_engine.keys.workers(), {"beating": beat})
    real_time_ns = time.time_ns
    monkeypatch.setattr(time, "time_ns", lambda: real_time_ns() + 60 * 10**9)  # this host: 60 s ahead
    assert scrape().value("dtq_workers_alive") == 1
