"""/ready is 503 while Redis refuses every write, not only while it does not answer: Redis
answers PING while it refuses writes for lack of replicas (NOREPLICAS under
min-replicas-to-write), at maxmemory (OOM), or as a read-only replica (READONLY: the URL still
names a master a failover demoted). Its code is the one a submit gets."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
import redis
from django.test import Client

from dtq_core.engine import Engine

from ..redis_server import RedisServer, free_port


def refuse_for_lack_of_replicas(rc: redis.Redis) -> None:
    rc.config_set("min-replicas-to-write", 1)


def fill_to_maxmemory(rc: redis.Redis) -> None:
    rc.config_set("maxmemory-policy", "noeviction")
    rc.config_set("maxmemory", int(rc.info("memory")["used_memory"]) - 1024)


def demote_to_replica(rc: redis.Redis) -> None:
    rc.replicaof("127.0.0.1", free_port())  # its master unreachable: a replica that stays READONLY


@pytest.fixture
def own_redis(tmp_path: Path, settings: Any) -> Iterator[redis.Redis]:
    """A Redis of this test's own (the test breaks it), which the API is pointed at."""
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    try:
        settings.DTQ = {**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": f"dtqtest:{uuid4().hex[:12]}"}
        with redis.Redis.from_url(server.url, decode_responses=True) as rc:
            yield rc
    finally:
        server.stop()


@pytest.mark.single_node
@pytest.mark.parametrize(("refuse", "code"), [(refuse_for_lack_of_replicas, "REDIS_WRITE_FAILED"),
                                              (fill_to_maxmemory, "REDIS_WRITE_FAILED"),
                                              (demote_to_replica, "REDIS_UNAVAILABLE")],
                         ids=["noreplicas", "oom", "readonly"])
def test_ready_is_503_while_redis_refuses_every_write(refuse: Callable[[redis.Redis], None], code: str,
                                                      own_redis: redis.Redis) -> None:
    client = Client()
    assert client.get("/ready").status_code == 200
    refuse(own_redis)
    submit = client.post("/api/v1/tasks", {"type": "dtq.echo", "payload": {}, "queue": "default"},
                         content_type="application/json")
    assert submit.status_code == 503 and submit.json()["error"]["code"] == code, submit.content
    # It should take the replica out of rotation: every submit routed to it would fail.
    ready = client.get("/ready")
    assert ready.status_code == 503, ready.content
    assert ready.json()["error"]["code"] == code


def test_the_probe_leaves_only_a_short_lived_key(live_engine: Engine) -> None:
    assert Client().get("/ready").status_code == 200
    ttl_ms = live_engine.client.pttl(f"{live_engine.keys.prefix}:ready")
    assert 0 < ttl_ms <= 5000
