"""The Redis Cluster clients a redis+cluster:// URL builds (connection.cluster_client and
async_cluster_client): from seed nodes, they read and write keys in every slot of a real 3-master
cluster, and follow a master's replacement by its replica; dtq's routed exchanges (dtq_core.routing)
follow a slot's migration (ASK, then MOVED)."""

from __future__ import annotations

import asyncio

import redis
from redis.crc import key_slot

from dtq_core.config import DtqConfig
from dtq_core.connection import async_cluster_client, cluster_client, topology
from dtq_core.routing import RoutedLines, exchange_routed
from dtq_core.wire import pack

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


def _node_id(port: int) -> str:
    return str(client(port).execute_command("CLUSTER", "MYID"))


def test_routed_exchanges_follow_ask_during_a_migration_and_moved_after_it(cluster_setup: ClusterSetup) -> None:
    """A slot migrating between masters answers ASK for a key its source no longer has, and MOVED
    once the slot is assigned to the target: the blocking and the worker's exchange send the
    command where Redis says (ASKING first for ASK) and read its real reply."""
    config = DtqConfig(redis_url=cluster_setup.url)
    rc = cluster_client(config)
    key = "dtqtest:cluster:ask:{migrating}"
    slot = key_slot(key.encode())
    source = rc.get_node_from_key(key)
    target = next(m for m in cluster_setup.masters() if m.port != source.port)
    src, dst = client(source.port), client(target.port)
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", _node_id(source.port))
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", _node_id(target.port))
    try:
        # The key is on neither node: the source sends the write on with ASK.
        assert exchange_routed(rc, [(key, pack(["SET", key, "1"]))]) == ["OK"]
        assert dst.pipeline(transaction=False).execute_command("ASKING").get(key).execute()[1] == "1"  # on the target

        async def worker_side() -> list[object]:
            ac = async_cluster_client(config, read_timeout_s=5)
            lines = RoutedLines(ac)
            try:
                return await lines.exchange([(key + "x", pack(["PING"])), (key, pack(["INCR", key]))], 5)
            finally:
                await lines.close()
                await ac.aclose()

        # INCR of a key the source lacks: ASK, then run on the target (1 -> 2).
        assert asyncio.run(worker_side())[1] == 2
        for port in (source.port, target.port):  # the migration ends: the slot is the target's
            client(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", _node_id(target.port))
        # The cached slot map still names the source, which now answers MOVED.
        assert exchange_routed(rc, [(key, pack(["GET", key]))]) == ["2"]
    finally:
        # The key leaves the target (ASKING: the slot may still be importing there) before the
        # slot goes back to the source, which Redis refuses while the target holds keys of it.
        dst.pipeline(transaction=False).execute_command("ASKING").delete(key).execute()
        for port in (source.port, target.port):
            client(port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", _node_id(source.port))
        rc.close()
