"""DTQ_REDIS_URL for Sentinel and Cluster: what each good URL names, and the one clear line that
each bad one stops every entry point with."""

from __future__ import annotations

import re

import pytest

from dtq_core.config import ConfigError, DtqConfig, read_env
from dtq_core.connection import topology
from dtq_core.redis_url import parse, redacted


@pytest.mark.parametrize(("url", "nodes", "service", "db"), [
    ("redis+sentinel://127.0.0.1:26379/mymaster", (("127.0.0.1", 26379),), "mymaster", 0),
    ("redis+sentinel://a:26379,b:26380,c/mymaster/3", (("a", 26379), ("b", 26380), ("c", 26379)), "mymaster", 3),
    ("redis+sentinel://:s3cret@a:1/my-master.1/", (("a", 1),), "my-master.1", 0),
    ("rediss+sentinel://[::1]:26379,[fe80::1]/m/0", (("::1", 26379), ("fe80::1", 26379)), "m", 0),
])
def test_sentinel_urls_name_the_sentinels_the_service_and_the_database(
        url: str, nodes: tuple[tuple[str, int], ...], service: str, db: int) -> None:
    target = parse(url)
    assert (target.topology, target.nodes, target.service_name, target.db) == ("sentinel", nodes, service, db)
    assert target.ssl is url.startswith("rediss")
    assert topology(DtqConfig(redis_url=url)) == "sentinel"


@pytest.mark.parametrize(("url", "nodes"), [
    ("redis+cluster://127.0.0.1:7000", (("127.0.0.1", 7000),)),
    ("redis+cluster://a:7000,b:7001,c/", (("a", 7000), ("b", 7001), ("c", 6379))),
    ("redis+cluster://user:p%40ss@a:7000/0", (("a", 7000),)),
])
def test_cluster_urls_name_their_seed_nodes(url: str, nodes: tuple[tuple[str, int], ...]) -> None:
    target = parse(url)
    assert (target.topology, target.nodes, target.db) == ("cluster", nodes, 0)
    assert topology(DtqConfig(redis_url=url)) == "cluster"


def test_the_password_and_user_are_read_and_never_shown() -> None:
    target = parse("redis+cluster://user:p%40ss@a:7000,b:7001")
    assert (target.username, target.password) == ("user", "p@ss")
    assert "p%40ss" not in repr(target) and "p@ss" not in repr(target)
    assert redacted("redis+sentinel://:pw@a:1,b:2/m/0") == "redis+sentinel://:***@a:1,b:2/m/0"
    assert redacted("redis://u:pw@host:6379/0") == "redis://u:***@host:6379/0"
    assert topology(DtqConfig(redis_url="redis://host:6379/0")) == "single"


@pytest.mark.parametrize(("url", "line"), [
    ("redis+sentinel://a:notaport/m", "DTQ_REDIS_URL has an invalid port in 'a:notaport': want 1-65535"),
    ("redis+sentinel://a:70000/m", "DTQ_REDIS_URL has an invalid port in 'a:70000': want 1-65535"),
    ("redis+cluster://a:7000,b:-1", "DTQ_REDIS_URL has an invalid port in 'b:-1': want 1-65535"),
    ("redis+sentinel:///m", "DTQ_REDIS_URL names no sentinel: list them as host:port[,host:port...]"),
    ("redis+cluster://", "DTQ_REDIS_URL names no cluster seed node: list them as host:port[,host:port...]"),
    ("redis+sentinel://a:1,,b:2/m", "DTQ_REDIS_URL has an invalid sentinel address ''"),
    ("redis+sentinel://a:26379", "DTQ_REDIS_URL must name the Sentinel service"),
    ("redis+sentinel://a:26379/", "DTQ_REDIS_URL must name the Sentinel service"),
    ("redis+sentinel://a:26379/m/x", "DTQ_REDIS_URL's path must be /<service>/<db>, the database a number"),
    ("redis+sentinel://a:26379/m/0/1", "DTQ_REDIS_URL's path must be /<service>/<db>"),
    ("redis+cluster://a:7000/1", "DTQ_REDIS_URL names database 1, but a Redis Cluster has only database 0"),
    ("redis+cluster://a:7000/0/0", "DTQ_REDIS_URL's path must be /0 or nothing"),
    ("redis+cluster://a:7000?db=1", "DTQ_REDIS_URL (redis+cluster://) takes no query string"),
    ("redis+tls://a:7000", "DTQ_REDIS_URL is not a redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://"),
])
def test_a_bad_url_stops_with_one_line_naming_the_variable(url: str, line: str) -> None:
    with pytest.raises(ConfigError, match="^" + re.escape(line)):
        read_env({"DTQ_REDIS_URL": url}.get)


def test_a_bad_url_never_prints_its_password() -> None:
    with pytest.raises(ConfigError) as caught:
        read_env({"DTQ_REDIS_URL": "redis+sentinel://:hunter2@a:x/m"}.get)
    assert "hunter2" not in str(caught.value) and ":***@" in str(caught.value)


@pytest.mark.parametrize(("env", "line"), [
    ({"DTQ_REDIS_MIN_REPLICAS": "-1"}, "DTQ_REDIS_MIN_REPLICAS must be 0 or more (got -1)"),
    ({"DTQ_REDIS_MIN_REPLICAS": "one"}, "DTQ_REDIS_MIN_REPLICAS must be an integer (got 'one')"),
    ({"DTQ_REDIS_WAIT_TIMEOUT_MS": "0"}, "DTQ_REDIS_WAIT_TIMEOUT_MS must be greater than 0 (got 0)"),
    ({"DTQ_REDIS_WAIT_TIMEOUT_MS": "1.5"}, "DTQ_REDIS_WAIT_TIMEOUT_MS must be an integer (got '1.5')"),
])
def test_the_replication_settings_are_validated(env: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as caught:
        read_env(env.get)
    assert str(caught.value) == line


def test_the_replication_settings_default_to_no_wait() -> None:
    config = read_env(lambda name: None)
    assert (config.redis_min_replicas, config.redis_wait_timeout_ms) == (0, 1000)
    assert read_env({"DTQ_REDIS_MIN_REPLICAS": "2"}.get).redis_min_replicas == 2
    with pytest.raises(ConfigError, match="^DTQ_REDIS_MIN_REPLICAS must be a whole number"):
        DtqConfig.from_mapping({"REDIS_MIN_REPLICAS": 1.5})
