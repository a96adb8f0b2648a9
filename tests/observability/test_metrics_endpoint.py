"""GET /metrics itself: Redis down or frozen, bad requests, and one collector per process."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from prometheus_client import REGISTRY

from dtq_core import metrics

from ..redis_server import RedisServer
from .conftest import Scrape


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    with RedisServer(tmp_path / "redis", appendonly=False) as server:
        yield server


def assert_only_redis_down(m: Scrape) -> None:
    assert m.status == 200 and m.value("dtq_redis_up") == 0
    # No stale or made-up Redis figures while it is down; the HTTP metrics still come out.
    assert not [name for name in m.samples if name.startswith("dtq_") and name != "dtq_redis_up"]
    assert "django_http_requests_total_by_method_total" in m.samples


def test_redis_down_still_answers_fast(scrape: Callable[..., Scrape]) -> None:
    # dtq_settings points REDIS_URL at a dead port when the test uses no redis fixture.
    m = scrape()
    assert_only_redis_down(m)
    assert m.elapsed_s < 2.0


def test_a_frozen_redis_answers_within_2s_then_recovers(settings: Any, private_redis: RedisServer,
                                                        scrape: Callable[..., Scrape]) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": private_redis.url, "KEY_PREFIX": "frozen"}
    assert scrape().value("dtq_redis_up") == 1
    private_redis.pause()
    try:
        m = scrape()
        assert_only_redis_down(m)
        assert m.elapsed_s < 2.0
    finally:
        private_redis.resume()
    m = scrape()
    assert m.value("dtq_redis_up") == 1 and m.value("dtq_dlq_depth") == 0


def test_a_killed_redis_answers_fast(settings: Any, private_redis: RedisServer,
                                     scrape: Callable[..., Scrape]) -> None:
    settings.DTQ = {**settings.DTQ, "REDIS_URL": private_redis.url, "KEY_PREFIX": "killed"}
    assert scrape().value("dtq_redis_up") == 1  # pooled connections exist now
    private_redis.kill()
    m = scrape()
    assert_only_redis_down(m)
    assert m.elapsed_s < 2.0


def test_only_get_and_head_are_allowed() -> None:
    client = Client()
    assert client.post("/metrics", data="x" * 2_000_000, content_type="text/plain").status_code == 405
    assert client.put("/metrics").status_code == 405
    assert client.head("/metrics").status_code == 200


def test_malformed_and_oversized_query_strings_are_ignored(scrape: Callable[..., Scrape]) -> None:
    client = Client()
    response = client.get("/metrics?name[]=%ff%00&" + "x=" + "y" * 50_000)
    assert response.status_code == 200 and b"dtq_redis_up" in response.content


def test_the_collector_is_registered_once_per_process(scrape: Callable[..., Scrape]) -> None:
    scrape()
    first = metrics.register()
    assert metrics.register() is first
    assert [c for c in REGISTRY._collector_to_names if isinstance(c, metrics.RedisCollector)] == [first]
    text = scrape().text
    assert text.count("# TYPE dtq_queue_depth gauge") <= 1 and text.count("# TYPE dtq_redis_up gauge") == 1


def test_request_id_is_echoed_on_metrics(scrape: Callable[..., Scrape]) -> None:
    response = Client().get("/metrics", headers={"X-Request-ID": "scrape-42"})
    assert response.status_code == 200 and response["X-Request-ID"] == "scrape-42"
