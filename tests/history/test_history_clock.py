"""The history read from an API host whose clock runs behind Redis's: workers count on Redis's
clock (RedisAlignedClock), so the range ends at Redis's now, not the host's (engine/history.py)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from dtq_core.engine import Engine
from tests.browser.server import ConsoleServer
from tests.dashboard.conftest import run_burst
from tests.failure.test_clock_skew import LIBFAKETIME, _skewed
from tests.redis_server import RedisServer

BEHIND_S = 300


@pytest.fixture
def skewed_server(redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> Iterator[ConsoleServer]:
    if LIBFAKETIME is None:
        pytest.skip("needs libfaketime")
    console = ConsoleServer(tmp_path, redis_server.url, key_prefix, **_skewed(-BEHIND_S)).start()
    yield console
    console.stop()


def test_stats_from_an_api_host_5_minutes_behind_still_count_the_tasks_that_just_ran(
        live_engine: Engine, skewed_server: ConsoleServer) -> None:
    ids = [live_engine.tasks.enqueue("dtq.echo", {"i": i}, queue="skewq").id for i in range(5)]
    run_burst(live_engine, queues=["skewq"])  # a worker on Redis's clock runs them now
    assert {live_engine.tasks.get(i)["status"] for i in ids} == {"SUCCEEDED"}
    own = live_engine.history.stats("1h", queue="skewq")["totals"]["succeeded"]
    assert own == 5  # a host on time sees them
    with urllib.request.urlopen(f"{skewed_server.url}/api/v1/stats?range=1h&queue=skewq", timeout=20) as r:
        body = json.loads(r.read())
    # Before, the 1 h window ended at the host's now, 5 minutes early, and missed them.
    assert body["totals"]["succeeded"] == 5, (body["end"], body["totals"])
