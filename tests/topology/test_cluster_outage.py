"""A worker while one Redis Cluster master is down: what holds before (or without) a failover.

The master of the wake channel's slot (where redis-py subscribes a worker by default), which also
holds two of a six-partition queue's partitions, is SIGKILLed and not replaced: its replica may not
fail over, and every node serves its own slots without full coverage (cluster-require-full-coverage
no). The worker's fetch over every partition keeps what the live masters claimed (nothing is left
claimed and unrun, to come back after a visibility timeout as a lost attempt), and its wake
subscription comes back through another node (a PUBLISH reaches every node of a cluster). The
whole service through a real failover: test_cluster_service.py.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from uuid import uuid4

from dtq_core.clock import SystemClock
from dtq_core.config import DtqConfig
from dtq_core.connection import async_cluster_client
from dtq_core.engine import Engine
from dtq_core.worker.store import Partition, WorkerStore
from dtq_core.worker.wake import WakeSubscription

from ..redis_topologies import ClusterSetup, client, poll, role
from .test_cluster_service import key_in

QUEUE = "outage"


def test_a_worker_serves_the_live_masters_while_one_is_down(fresh_cluster: ClusterSetup) -> None:
    config = DtqConfig(redis_url=fresh_cluster.url, key_prefix=f"dtqtest:{uuid4().hex[:12]}",
                       queue_partitions=((QUEUE, 6),), accept_unknown_types=True)
    engine = Engine(config)
    layout = engine.registry.ensure(QUEUE)
    task_ids = {tag: engine.tasks.enqueue("dtq.echo", queue=QUEUE, idempotency_key=key_in(layout, tag, "t")).id
                for tag in layout.tags}
    victim = next(s for s in fresh_cluster.masters()
                  if s.port == int(engine.client.get_node_from_key(engine.keys.wake()).port))  # type: ignore[attr-defined]
    down = {tag for tag in layout.tags
            if int(engine.client.get_node_from_key(engine.keys.partition(tag)).port) == victim.port}  # type: ignore[attr-defined]
    assert len(down) == 2
    for server in fresh_cluster.live():
        client(server.port).config_set("cluster-require-full-coverage", "no")
        if role(server.port) == "slave" and int(client(server.port).info("replication")["master_port"]) == victim.port:
            client(server.port).config_set("cluster-replica-no-failover", "yes")
    live_master = next(s for s in fresh_cluster.masters() if s is not victim)

    async def scenario() -> tuple[list[str], list[str], bool, set[str]]:
        # Connected first, as a running worker's client is (redis-py cannot start without the
        # first master of its slot map: it asks that one for COMMAND).
        redis_client = async_cluster_client(config, read_timeout_s=5.0)
        await redis_client.initialize()
        store = WorkerStore(config, redis_client, SystemClock(), "w-outage", timeout_s=5.0)
        wake = WakeSubscription(redis_client, engine.keys.wake(), "w-outage")
        wake.serve(layout.tags)
        wake.start()
        try:
            while not wake.subscribed:
                await asyncio.sleep(0.02)
            victim.kill()
            # 1. One fetch over every partition.
            fetched = await store.fetch([(p, 10) for p in Partition.all_of(layout)])
            # 2. The subscription, lost with the victim, comes back, and hears a live partition ring.
            # Counted, not sampled: while the master is down a subscription may not last long
            # enough for a poll to see it (each one sweeps every partition once).
            deadline = time.monotonic() + 20
            while wake.subscriptions < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            subscribed = wake.subscriptions >= 2
            live = next(tag for tag in layout.tags if tag not in down)
            # A resubscribe sweeps every partition, which would hide whether the ring was heard:
            # ring again until one is heard with no resubscribe in between (a loaded machine
            # has seen the subscription flap while the master is down).
            woken: set[str] = set()
            for _ in range(10):
                before = wake.subscriptions
                wake.ready.clear()
                client(live_master.port).publish(engine.keys.wake(), live)  # as a script there rings
                await wake.wait(5.0)
                woken = set(wake.ready)
                if wake.subscriptions == before:
                    break
            return sorted(row.task_id for row in fetched.rows), sorted(fetched.failed), subscribed, woken
        finally:
            await wake.close()
            await store.aclose()

    rows, failed, subscribed, woken = asyncio.run(scenario())
    assert failed == sorted(down)
    # Every task the live masters' fetch scripts claimed came back to be run.
    assert rows == sorted(task_id for tag, task_id in task_ids.items() if tag not in down)
    assert subscribed, "the wake subscription did not come back through a live node"
    assert woken == {next(tag for tag in layout.tags if tag not in down)}
    engine.client.close()


def test_ready_is_503_while_the_cluster_is_down(fresh_cluster: ClusterSetup, settings: Any) -> None:
    # A master and its replicas gone: every node says cluster_state:fail and refuses key commands.
    # A PING (keyless) is still answered; /ready's write is not.
    from django.test import Client

    from dtq_core.conf import get_engine

    settings.DTQ = {**settings.DTQ, "REDIS_URL": fresh_cluster.url, "KEY_PREFIX": f"dtqtest:{uuid4().hex[:12]}",
                    "ACCEPT_UNKNOWN_TYPES": True}
    http = Client()
    assert http.get("/ready").status_code == 200
    assert get_engine().tasks.enqueue("dtq.echo", queue="q").id
    victim = fresh_cluster.masters()[0]
    for replica in [s for s in fresh_cluster.live() if role(s.port) == "slave"
                    and int(client(s.port).info("replication")["master_port"]) == victim.port]:
        replica.kill()
    victim.kill()
    live = fresh_cluster.live()
    poll(lambda: all(client(s.port).cluster("info")["cluster_state"] == "fail" for s in live), timeout=20,
         what="cluster_state:fail on every live node")
    submit = http.post("/api/v1/tasks", {"type": "dtq.echo", "payload": {}, "queue": "q"},
                       content_type="application/json")
    assert submit.status_code == 503, submit.content
    probe = http.get("/ready")
    assert probe.status_code == 503 and probe.json()["error"]["code"] == "REDIS_UNAVAILABLE", probe.content
