"""A batch submit on a Redis Cluster while one master is down (killed, not replaced): each task
is answered on its own, and the live masters' tasks land whatever else goes wrong beside them (a
live master without the scripts, a live master whose replica is down, a partition closed
meanwhile, the registry's own master down). A 503 for the whole batch is right only when nothing
landed: a client that retries a batch sends every task again."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
import redis

import dtq_core.engine.registry as registry_module
from dtq_api.batch import submit_batch
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import ReplicationTimeout
from dtq_core.redis_errors import translate

from ..redis_server import RedisServer
from ..redis_topologies import ClusterSetup, client, poll, role
from .test_cluster_service import key_in

QUEUE = "batched"


def port_of(engine: Engine, key: str) -> int:
    return int(engine.client.get_node_from_key(key).port)  # type: ignore[attr-defined]


def tags_on(engine: Engine, layout: Any, master: RedisServer) -> set[str]:
    return {tag for tag in layout.tags if port_of(engine, engine.keys.partition(tag)) == master.port}


def replica_of(cluster: ClusterSetup, master: RedisServer) -> RedisServer:
    return next(s for s in cluster.live() if role(s.port) == "slave"
                and int(client(s.port).info("replication")["master_port"]) == master.port)


def no_failover_for(cluster: ClusterSetup, victim: RedisServer, *, full_coverage: bool = False) -> None:
    """The victim's replica does not take over; without full coverage every live node serves its
    own slots (with it, the cluster says CLUSTERDOWN once it marks the victim failed)."""
    for server in cluster.live():
        if not full_coverage:
            client(server.port).config_set("cluster-require-full-coverage", "no")
    replica_of(cluster, victim)  # it exists
    client(replica_of(cluster, victim).port).config_set("cluster-replica-no-failover", "yes")


def items_for(layout: Any, tags: Any, name: str, per_tag: int = 2) -> list[dict[str, Any]]:
    return [{"type": "dtq.echo", "queue": layout.queue, "payload": {"tag": tag, "n": n},
             "idempotency_key": key_in(layout, tag, f"{name}{n}")} for n in range(per_tag) for tag in tags]


def assert_answered(engine: Engine, items: list[dict[str, Any]], results: list[dict[str, Any]],
                    down: set[str]) -> None:
    """The down master's items answered REDIS_UNAVAILABLE, every other one queued as sent."""
    for item, result in zip(items, results, strict=True):
        if item["payload"]["tag"] in down:
            assert result["error"]["code"] == "REDIS_UNAVAILABLE", result
            # Its connection broke (the call may have run) or was refused (it did not).
            assert re.search("may or may not have been queued|was not queued", result["error"]["message"])
        else:
            assert result["status"] == "QUEUED" and result["created"] is True, result
            assert engine.tasks.get(result["id"])["payload"] == item["payload"]


@pytest.fixture
def engine_on(fresh_cluster: ClusterSetup) -> Iterator[Any]:
    """Engines on the test's cluster and key prefix (two of them: two processes)."""
    engines: list[Engine] = []
    prefix = f"dtqtest:{uuid4().hex[:12]}"

    def make(**options: Any) -> Engine:
        config = DtqConfig(redis_url=fresh_cluster.url, key_prefix=prefix,
                           queue_partitions=((QUEUE, 6), ("gone", 3)), accept_unknown_types=True, **options)
        engines.append(Engine(config))
        return engines[-1]

    yield make
    for engine in engines:
        engine.client.close()


def warmed(engine: Engine) -> Any:
    layout = engine.registry.ensure(QUEUE)
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue=QUEUE) for _ in range(12)])  # scripts loaded
    return layout


def test_each_task_is_answered_while_one_master_is_down(fresh_cluster: ClusterSetup, engine_on: Any) -> None:
    # One call per partition, so per master: the live masters' calls land whatever the order.
    engine = engine_on()
    layout = warmed(engine)
    victim = fresh_cluster.masters()[1]
    down = tags_on(engine, layout, victim)
    assert down and len(down) < len(layout.tags)
    no_failover_for(fresh_cluster, victim)
    victim.kill()

    items = items_for(layout, layout.tags, "b")
    results = submit_batch(engine, items, "req-outage")
    assert_answered(engine, items, results, down)
    # Sent again (idempotency keys), the landed ones are found, not queued twice.
    for item, first, second in zip(items, results, submit_batch(engine, items, "req-outage-2"), strict=True):
        if "id" in first:
            assert (second["id"], second["created"]) == (first["id"], False)
        if item["payload"]["tag"] in down:  # its connection is refused now: certainly not queued
            assert second["error"]["message"].endswith("was not queued (Redis refused the connection): send it again")
    # A batch only for the down master landed nothing: the request fails as a whole (503).
    with pytest.raises(redis.exceptions.ConnectionError):
        submit_batch(engine, [item for item in items if item["payload"]["tag"] in down], "req-outage-3")


def test_a_live_master_without_the_scripts_gets_them_while_another_master_is_down(
        fresh_cluster: ClusterSetup, engine_on: Any) -> None:
    engine = engine_on()
    layout = warmed(engine)
    victim, flushed, _ = fresh_cluster.masters()
    down, on_flushed = tags_on(engine, layout, victim), tags_on(engine, layout, flushed)
    assert down and on_flushed
    no_failover_for(fresh_cluster, victim)
    client(flushed.port).script_flush()
    client(flushed.port).function_flush()
    victim.kill()

    items = items_for(layout, layout.tags, "f")
    # The flushed master took the load (it alone) and its calls were sent again.
    assert_answered(engine, items, submit_batch(engine, items, "req-flushed"), down)


def test_a_live_masters_short_wait_fails_its_own_tasks_only(fresh_cluster: ClusterSetup, engine_on: Any) -> None:
    engine = engine_on(redis_min_replicas=1, redis_wait_timeout_ms=300)
    # Warmed up (scripts loaded, the queue registered) without the WAIT: on a fresh cluster under
    # CI load a replica may not confirm the warm-up's writes within 300 ms, which is not the test.
    layout = warmed(engine_on())
    assert engine.registry.ensure(QUEUE) == layout  # read, and cached, while every master is up
    victim, lagging, healthy = fresh_cluster.masters()
    down, on_lagging, on_healthy = (tags_on(engine, layout, m) for m in (victim, lagging, healthy))
    assert down and on_lagging and on_healthy
    no_failover_for(fresh_cluster, victim)
    replica_of(fresh_cluster, lagging).kill()  # the lagging master is up; its WAIT 1 answers 0
    victim.kill()

    items = items_for(layout, layout.tags, "r")
    results = submit_batch(engine, items, "req-replication")
    for item, result in zip(items, results, strict=True):
        tag = item["payload"]["tag"]
        if tag in on_healthy:
            assert result["created"] is True, result
        else:
            code = "REDIS_UNAVAILABLE" if tag in down else "REDIS_REPLICATION_TIMEOUT"
            assert result["error"]["code"] == code, result
    # Sent again with their keys, the healthy master's tasks are found, not queued twice; a batch
    # of the lagging master's tasks alone landed nowhere confirmed: the whole request is a 503.
    healthy_items = [item for item in items if item["payload"]["tag"] in on_healthy]
    assert all(r["created"] is False for r in submit_batch(engine, healthy_items, "req-again"))
    with pytest.raises(ReplicationTimeout):
        submit_batch(engine, [item for item in items if item["payload"]["tag"] in on_lagging], "req-lagging")


def test_a_partition_closed_meanwhile_fails_its_tasks_and_keeps_the_first_rounds(
        fresh_cluster: ClusterSetup, engine_on: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "LAYOUT_CACHE_S", 3600.0)  # the deleted queue stays cached
    engine = engine_on()
    layout = warmed(engine)
    gone = engine.registry.ensure("gone")
    victim = fresh_cluster.masters()[1]
    gone_down, kept_down = tags_on(engine, gone, victim), tags_on(engine, layout, victim)
    assert len(gone_down) < len(gone.tags) and kept_down and len(kept_down) < len(layout.tags)
    engine_on().queues.delete("gone", Actor.user("ops", source="cli"))  # another process deletes it
    no_failover_for(fresh_cluster, victim)
    victim.kill()

    items = (items_for(gone, [t for t in gone.tags if t not in gone_down], "g", per_tag=1)
             + [{"type": "dtq.echo", "queue": QUEUE, "payload": {"n": n}} for n in range(12)])  # round robin
    live = [tag for tag in layout.tags if tag not in kept_down]
    before = {tag: engine.client.xlen(engine.keys.stream(tag, QUEUE, "normal")) for tag in live}
    results = submit_batch(engine, items, "req-second-round")
    landed = sum(engine.client.xlen(engine.keys.stream(tag, QUEUE, "normal")) - before[tag] for tag in live)
    assert landed > 0
    kept_results = [r for item, r in zip(items, results, strict=True) if item["queue"] == QUEUE]
    assert sum(1 for r in kept_results if r.get("created") is True) == landed
    assert {r["error"]["code"] for r in kept_results if "error" in r} == {"REDIS_UNAVAILABLE"}
    # The closed partitions' tasks were refused there, and re-registering the queue reached the
    # down master: not queued, Redis trouble in their slots.
    gone_results = [r for item, r in zip(items, results, strict=True) if item["queue"] == "gone"]
    assert gone_results and {r["error"]["code"] for r in gone_results} == {"REDIS_UNAVAILABLE"}


def test_the_registrys_master_down_leaves_the_live_masters_partitions_open(
        fresh_cluster: ClusterSetup, engine_on: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    engine = engine_on()
    layout = warmed(engine)
    victim = next(m for m in fresh_cluster.masters() if m.port == port_of(engine, engine.keys.queues()))
    live = [tag for tag in layout.tags if tag not in tags_on(engine, layout, victim)]
    assert live
    no_failover_for(fresh_cluster, victim)
    victim.kill()
    monkeypatch.setattr(registry_module, "LAYOUT_CACHE_S", 0.0)  # as any submit 2 s after the last read

    results = submit_batch(engine, items_for(layout, live, "k", per_tag=1), "req-registry")
    assert all(r.get("created") is True for r in results), results
    assert engine.tasks.enqueue("dtq.echo", queue=QUEUE, idempotency_key=key_in(layout, live[0], "single")).created
    # A queue this process never read cannot be placed: Redis trouble, not a refusal.
    with pytest.raises(redis.exceptions.ConnectionError):
        engine.tasks.enqueue("dtq.echo", queue="unseen")


def test_a_batch_on_a_cluster_marked_down_is_a_503(fresh_cluster: ClusterSetup, engine_on: Any) -> None:
    # With cluster-require-full-coverage yes (the default) the live masters answer CLUSTERDOWN
    # once they mark the victim failed: nothing lands, and the whole request is Redis trouble
    # (503 REDIS_UNAVAILABLE), whichever item comes first.
    engine = engine_on()
    layout = warmed(engine)
    victim = fresh_cluster.masters()[1]
    down = tags_on(engine, layout, victim)
    no_failover_for(fresh_cluster, victim, full_coverage=True)
    victim.kill()
    for server in fresh_cluster.live():
        poll(lambda port=server.port: client(port).cluster("info")["cluster_state"] == "fail", timeout=20,
             what=f"cluster_state:fail on {server.port}")
    items = items_for(layout, sorted(layout.tags, key=lambda tag: tag in down), "d", per_tag=1)  # live first
    with pytest.raises(redis.exceptions.RedisError) as raised:
        submit_batch(engine, items, "req-clusterdown")
    trouble = translate(raised.value)
    assert trouble is not None and trouble.code == "REDIS_UNAVAILABLE", repr(raised.value)
