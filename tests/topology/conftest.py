"""Fixtures of the topology suite: a Sentinel setup and a Redis Cluster on loopback (see
tests/redis_topologies.py), each started once per module; `fresh_sentinel` and `fresh_cluster` are
the test's own, for tests that kill a master."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ..redis_topologies import ClusterSetup, SentinelSetup


@pytest.fixture(scope="module")
def sentinel_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel")).start()
    yield setup
    setup.stop()


@pytest.fixture
def fresh_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel")).start()
    yield setup
    setup.stop()


@pytest.fixture(scope="module")
def cluster_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSetup]:
    setup = ClusterSetup(tmp_path_factory.mktemp("cluster")).start()
    yield setup
    setup.stop()


@pytest.fixture
def fresh_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSetup]:
    """A cluster of the test's own, for tests that kill one of its masters."""
    setup = ClusterSetup(tmp_path_factory.mktemp("cluster")).start()
    yield setup
    setup.stop()
