"""Queue operations on a 3-master Redis Cluster: a queue of six partitions, spread over the
masters, is counted, paged, paused, purged and deleted as one queue; the schedule merges every
partition, and /metrics' sums survive the delete. The engine gets a cluster client directly (a
redis+cluster:// URL does not start dtq yet)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.connection import cluster_client
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.reads import Page
from dtq_core.errors import QueueNotEmpty
from dtq_core.metrics import read_snapshot

from ..redis_topologies import ClusterSetup

OPERATOR = Actor.cli()


@pytest.fixture
def cluster_engine(cluster_setup: ClusterSetup) -> Iterator[Engine]:
    config = DtqConfig(redis_url=cluster_setup.url, key_prefix="queues", queue_partitions=(("wide", 6),),
                       accept_unknown_types=True)
    client = cluster_client(config)
    yield Engine(config, client=client)
    client.close()


def _every_page(read: Callable[[str | None], Page]) -> list[str]:
    """The task ids of every page, following the cursors."""
    shown: list[str] = []
    cursor = None
    while True:
        page = read(cursor)
        shown += [item["task_id"] for item in page.items]
        cursor = page.next_cursor
        if not cursor:
            return shown


def test_a_partitioned_queue_on_a_cluster_acts_as_one_queue(cluster_engine: Engine) -> None:
    engine, client = cluster_engine, cluster_engine.client
    assert isinstance(client, redis.cluster.RedisCluster)
    queued = [engine.tasks.enqueue("dtq.echo", queue="wide", priority=p).id for p in ("high", "normal", "low") * 4]
    delayed = [engine.tasks.enqueue("dtq.echo", queue="wide", delay_seconds=60).id for _ in range(7)]
    layout = engine.registry.get("wide", fresh=True)
    assert layout is not None
    masters = {client.get_node_from_key(engine.keys.partition(tag)).name for tag in layout.tags}
    assert len(masters) == 3  # the partitions are spread

    stats = engine.queues.get("wide")
    assert stats["depth"] == {"high": 4, "normal": 4, "low": 4} and stats["retry_scheduled"] == 7
    assert stats["partitions"] == 6
    assert sorted(_every_page(lambda cursor: engine.queues.waiting("wide", after=cursor, limit=5))) == sorted(queued)
    assert sorted(_every_page(lambda cursor: engine.schedule.list(cursor=cursor, limit=3))) == sorted(delayed)
    assert engine.schedule.count() == 7

    assert engine.queues.pause("wide", OPERATOR) is True
    assert all(client.exists(engine.keys.paused(tag)) for tag in layout.tags)
    assert engine.queues.resume("wide", OPERATOR) is True
    with pytest.raises(QueueNotEmpty):
        engine.queues.delete("wide", OPERATOR)
    assert [client.get(engine.keys.owner(tag)) for tag in layout.tags] == [layout.owner] * 6  # opened again

    assert engine.queues.purge("wide", OPERATOR) == 12
    for task_id in delayed:
        engine.tasks.cancel(task_id, OPERATOR)
    before = read_snapshot(client, engine.keys, engine.scripts, alive_window_ms=30_000)
    assert before.tasks[("wide", "dtq.echo", "cancelled")] == 19
    engine.queues.delete("wide", OPERATOR)
    assert [client.get(engine.keys.owner(tag)) for tag in layout.tags] == [f"deleted|{layout.owner}"] * 6
    after = read_snapshot(client, engine.keys, engine.scripts, alive_window_ms=30_000)
    assert after.queues == [] and after.tasks == before.tasks
