"""The Redis password never reaches a log line or a message, wherever the URL carries it: in
user:password@ or in a query parameter redis-py reads (password=, sentinel_password=,
ssl_password=...) (docs/observability.md: "the Redis password as ***")."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest
import redis

from dtq_core.keys import Keys
from dtq_core.redis_url import redacted

from ..conftest import WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer


@pytest.mark.parametrize(("url", "shown"), [
    ("redis://user:s3cret@host:6379/0", "redis://user:***@host:6379/0"),
    ("redis://host:6379/0?password=s3cret&db=1", "redis://host:6379/0?password=***&db=1"),
    ("rediss://:s3cret@host?ssl_password=k3y&socket_timeout=2#x", "rediss://:***@host?ssl_password=***&socket_timeout=2#x"),
    ("redis://host?sentinel_password=s3cret", "redis://host?sentinel_password=***"),
    ("redis://host?PASSWORD=s3cret", "redis://host?PASSWORD=***"),
    ("redis://host?pass%77ord=s3cret", "redis://host?pass%77ord=***"),  # redis-py decodes the name
    ("unix:///run/redis.sock?password=s3cret", "unix:///run/redis.sock?password=***"),
    ("redis+sentinel://u:s3cret@a:26379,b:26380/mymaster", "redis+sentinel://u:***@a:26379,b:26380/mymaster"),
    ("redis://host:6379/0?db=2", "redis://host:6379/0?db=2"),
])
def test_every_password_in_a_url_is_masked(url: str, shown: str) -> None:
    assert redacted(url) == shown


@pytest.mark.single_node
def test_a_password_given_as_a_url_query_parameter_is_not_logged(tmp_path: Path) -> None:
    secret = "hunter2-" + uuid4().hex[:8]
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    try:
        redis.Redis(port=server.port).config_set("requirepass", secret)
        url = f"{server.url}?password={secret}"
        prefix = f"dtqtest:{uuid4().hex[:12]}"
        worker = WorkerProcess(["--name", "pw", "--queues", "default"], worker_env(url, prefix), tmp_path / "w.log")
        try:
            with redis.Redis.from_url(url, decode_responses=True) as rc:
                wait_for(lambda: rc.zscore(Keys(prefix).workers(), "pw") is not None, timeout=30,
                         message=worker.output)
            # The start line names the Redis it serves: with the password as ***.
            assert [line for line in worker.output().splitlines() if secret in line] == []
            assert "password=***" in worker.output()
        finally:
            worker.kill()
    finally:
        server.stop()
