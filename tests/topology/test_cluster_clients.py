"""The Redis Cluster clients a redis+cluster:// URL builds (connection.cluster_client and
async_cluster_client): from seed nodes, they read and write keys in every slot of a real 3-master
cluster, and follow a master's replacement by its replica. (The engine itself does not run on a
cluster yet: its keys are not laid out for one.)"""

from __future__ import annotations

import asyncio

import redis
from redis.crc import key_slot

from dtq_core.config import DtqConfig
from dtq_core.connection import async_cluster_client, cluster_client, topology

from ..redis_topologies import ClusterSetup, client, role
from .test_sentinel_clients import until_it_works

KEYS = [f"dtqtest:cluster:{i}" for i in range(24)]


def test_the_blocking_client_writes_and_reads_keys_on_every_master(cluster_setup: ClusterSetup) -> None:
    config = DtqConfig(redis_url=cluster_setup.url)
    assert topology(config) == "cluster"
    rc = cluster_client(config)
    try:
        for key in KEYS:
            assert rc.set(key, key)
        assert [rc.get(key) for key in KEYS] == KEYS
        # The keys really are spread: each master holds some of them.
        owners = {int(rc.get_node_from_key(key).port) for key in KEYS}
        assert owners == {m.port for m in cluster_setup.masters()}
        assert len({key_slot(key.encode()) for key in KEYS}) == len(KEYS)
    finally:
        for key in KEYS:
            rc.delete(key)
        rc.close()


def test_the_asyncio_client_writes_and_reads_keys_in_different_slots(cluster_setup: ClusterSetup) -> None:
    async def scenario() -> None:
        rc = async_cluster_client(DtqConfig(redis_url=cluster_setup.url), read_timeout_s=5.0)
        try:
            for key in KEYS:
                assert await rc.set(key, "a" + key)
            assert [await rc.get(key) for key in KEYS] == ["a" + key for key in KEYS]
            for key in KEYS:
                await rc.delete(key)
        finally:
            await rc.aclose()

    asyncio.run(scenario())


def test_the_client_follows_a_replica_promoted_in_place_of_a_killed_master(cluster_setup: ClusterSetup) -> None:
    # Last in this module: it kills a master.
    rc = cluster_client(DtqConfig(redis_url=cluster_setup.url))
    try:
        victim = cluster_setup.masters()[0]
        key = next(k for k in KEYS if int(rc.get_node_from_key(k).port) == victim.port)
        rc.set(key, "before")
        client(victim.port).wait(1, 2000)  # on its replica before the kill
        promoted = cluster_setup.kill_master(victim)
        assert role(promoted.port) == "master"
        value, _ = until_it_works(lambda: rc.get(key), "the cluster client")
        assert value == "before"
        assert rc.set(key, "after") and rc.get(key) == "after"
        assert int(rc.get_node_from_key(key).port) == promoted.port
    finally:
        try:
            rc.close()
        except redis.RedisError:
            pass
