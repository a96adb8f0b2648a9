"""Schedules are Redis data like tasks: a Redis SIGKILLed and restarted from its AOF keeps them,
with their state (next tick, pause, last runs), and the leader fires on from where they were.
Single node: the test owns its redis-server."""

from __future__ import annotations

import time
from pathlib import Path
from uuid import uuid4

import pytest

from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec

from ..redis_server import RedisServer
from .test_engine import fire, lead, tag_of_schedule

pytestmark = pytest.mark.single_node
ACTOR = Actor.cli()


def test_schedules_survive_a_redis_restart_from_its_aof(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", appendonly=True).start()
    try:
        engine = Engine(DtqConfig(redis_url=server.url, key_prefix=f"dtqtest:{uuid4().hex[:12]}"),
                        clock=FakeClock(start_ms=int(time.time() * 1000)))
        # Every write fsynced: the loss window of appendfsync everysec is test_aof_loss.py's subject.
        engine.client.config_set("appendfsync", "always")
        engine.periodic.create(PeriodicSpec(name="kept", type="dtq.echo", every_seconds=10), actor=ACTOR)
        engine.periodic.create(PeriodicSpec(name="paused", type="dtq.echo", cron="0 3 * * *",
                                            timezone="Europe/Berlin"), actor=ACTOR)
        engine.periodic.pause("paused", actor=ACTOR)
        lead(engine, tag_of_schedule(engine, "kept"))
        engine.clock.advance(10)  # type: ignore[attr-defined]
        assert len(fire(engine, "kept")[1]) == 1
        before = engine.periodic.list()
        server.kill()
        server.start()
        engine.client.connection_pool.disconnect()
        assert engine.periodic.list() == before
        lead(engine, tag_of_schedule(engine, "kept"))
        engine.clock.advance(10)  # type: ignore[attr-defined]
        assert len(fire(engine, "kept")[1]) == 1  # the next tick, once
        assert [r["kind"] for r in engine.periodic.get("kept")["last_runs"]] == ["tick", "tick"]
    finally:
        server.stop()
