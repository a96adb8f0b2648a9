"""The /metrics counters (dtq_tasks_total and the others read from the partitions' stats:* hashes)
never go back when partitions are forgotten: a partition the leader closes after its queue was
lowered (closePartition), or one a queue delete drops (deleteQueue), hands its statistics over in
the step that deletes them, and exactly one caller adds them to the global hashes (dtq_core/keys.py),
however many race or retry."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Callable

import pytest
import redis
from django.test import Client

from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import DtqError
from dtq_core.keys import Keys
from dtq_core.partitions import Layout
from dtq_core.worker.leader import LeaderLoop
from dtq_core.worker.store import WorkerStore
from tests.api.support import drain

from ..conftest import WorkerProcess, wait_for
from ..observability.conftest import Scrape, parse

FAST = {"DTQ_SCHEDULER_LOCK_TTL_S": 2, "DTQ_VISIBILITY_TIMEOUT_S": 2, "DTQ_HEARTBEAT_INTERVAL_S": 0.5}


class Leader(LeaderLoop):
    """The scheduler mixin on its own (as in test_partitions.py): the state LeaderLoop reads."""

    def __init__(self, config: DtqConfig, worker_id: str) -> None:
        self.config, self.worker_id = config, worker_id
        self.clock = FakeClock(start_ms=int(time.time() * 1000))
        self.store = WorkerStore(config, async_client(config, read_timeout_s=10), self.clock, worker_id)
        self.is_leader = False
        self._stopping = False

    def rounds(self, count: int) -> None:
        async def scenario() -> None:
            try:
                for _ in range(count):
                    await self._lead_once()
                    await self._reconcile_once()
            finally:
                await self.store.aclose()

        asyncio.run(scenario())


def partitioned(config: DtqConfig, **counts: int) -> DtqConfig:
    return dataclasses.replace(config, queue_partitions=tuple(sorted(counts.items())))


def scrape() -> Scrape:
    """GET /metrics, parsed."""
    response = Client().get("/metrics")
    assert response.status_code == 200
    text = response.content.decode()
    return Scrape(response.status_code, 0.0, text, parse(text))


def succeeded(m: Scrape, queue: str) -> float:
    return sum(v for labels, v in m.samples.get("dtq_tasks_total", [])
               if labels.get("queue") == queue and labels.get("outcome") == "succeeded")


def layout(client: redis.Redis, keys: Keys, queue: str) -> Layout:
    return Layout.from_json(queue, client.hget(keys.queues(), queue))


# -- a queue lowered: the leader closes its drained partitions --------------------------------

def test_a_drained_partition_hands_its_counts_to_the_global_ones_once(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, keys = Engine(partitioned(config, shrink=3)), Keys(config.key_prefix)
    tags = engine.registry.ensure("shrink").tags
    for n, tag in enumerate(tags, start=1):  # what each partition's completions counted
        redis_client.hincrby(keys.stats_tasks(tag), "shrink|dtq.echo|succeeded", 10 * n)
        redis_client.hincrby(keys.stats_counters(tag), "redeliveries", n)
    assert succeeded(scrape(), "shrink") == 60
    # Two rounds: the first starts the dropped partitions draining, the second closes them.
    Leader(partitioned(config, shrink=1), "w1").rounds(2)
    assert layout(redis_client, keys, "shrink").all_tags == tags[:1]
    assert succeeded(scrape(), "shrink") == 60
    assert redis_client.hgetall(keys.global_stats_tasks()) == {"shrink|dtq.echo|succeeded": "50"}
    assert redis_client.hgetall(keys.global_stats_counters()) == {"redeliveries": "5"}
    assert not any(redis_client.exists(keys.stats_tasks(tag)) for tag in tags[1:])
    # It should hand nothing over again: a close run again (a leader that lost the layout's
    # compare-and-set retries it next round) finds the partition closed and its counts taken.
    again = engine.scripts("closePartition", keys=[keys.partition(tags[1])],
                           args=[layout(redis_client, keys, "shrink").owner, "w1", Keys.GROUP])
    assert again == [1, [], [], []]
    Leader(partitioned(config, shrink=1), "w1").rounds(1)
    assert succeeded(scrape(), "shrink") == 60


@pytest.mark.slow
def test_lowering_a_queues_partitions_does_not_take_back_its_counted_tasks(
        config: DtqConfig, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    engine, keys = Engine(partitioned(config, shrink=3)), Keys(config.key_prefix)
    ids = [engine.tasks.enqueue("dtq.echo", {"n": i}, queue="shrink").id for i in range(30)]
    tags = engine.registry.ensure("shrink").tags
    assert len({task_id.split("-")[0] for task_id in ids}) == 3
    first = start_worker("--name", "three", "--queues", "shrink", DTQ_QUEUE_PARTITIONS="shrink=3", **FAST)
    wait_for(lambda: all(redis_client.hget(keys.task(t), "status") == "SUCCEEDED" for t in ids), timeout=60,
             message=first.output)
    assert succeeded(scrape(), "shrink") == 30
    first.proc.terminate()
    first.wait(40)
    # The operator lowers the queue to one partition: the leader drains and forgets the other two.
    second = start_worker("--name", "one", "--queues", "shrink", DTQ_QUEUE_PARTITIONS="shrink=1", **FAST)
    wait_for(lambda: layout(redis_client, keys, "shrink").all_tags == tags[:1], timeout=40, message=second.output)
    # It should not go back: Prometheus would see a reset, and rate() a burst that never happened.
    assert succeeded(scrape(), "shrink") == 30


# -- a queue deleted: its partitions are dropped ----------------------------------------------

def test_only_the_drop_that_deletes_a_partitions_counts_hands_them_over(live_engine: Engine) -> None:
    # Two operators' deletes, both past the close (the second accepts the first's tombstone)
    # before either drops.
    engine, keys = live_engine, live_engine.keys
    queue_layout = engine.registry.ensure("twice")
    partition = [keys.partition(queue_layout.tags[0])]
    engine.client.hincrby(keys.stats_tasks(queue_layout.tags[0]), "twice|dtq.echo|succeeded", 5)
    close, drop = ["close", queue_layout.owner, "twice", Keys.GROUP], ["drop", queue_layout.owner, "twice", 60]
    assert [engine.scripts("deleteQueue", keys=partition, args=close) for _ in range(2)] == [[0], [0]]
    assert [engine.scripts("deleteQueue", keys=partition, args=drop) for _ in range(2)] \
        == [[0, ["twice|dtq.echo|succeeded", "5"], [], []], [0, [], [], []]]


def test_a_delete_finished_twice_counts_the_queues_tasks_once(
        live_engine: Engine) -> None:
    engine, keys = live_engine, live_engine.keys
    queue_layout = engine.registry.ensure("twice")
    engine.client.hincrby(keys.stats_tasks(queue_layout.tags[0]), "twice|dtq.echo|succeeded", 7)
    engine.scripts("deleteQueue", keys=[keys.partition(queue_layout.tags[0])],
                   args=["close", queue_layout.owner, "twice", Keys.GROUP])
    engine.registry.unregister(queue_layout)
    engine.registry.unregister(queue_layout)  # a delete run again after a crash, or the other operator's
    assert succeeded(scrape(), "twice") == 7


def test_two_concurrent_deletes_of_one_queue_do_not_double_its_counts(
        live_engine: Engine) -> None:
    queues = [f"gone{i:02d}" for i in range(20)]
    live_engine.tasks.enqueue_many([live_engine.tasks.validate("dtq.echo", {}, queue=q) for q in queues
                                    for _ in range(5)])
    drain(live_engine.config, queues=queues)
    assert sum(succeeded(scrape(), q) for q in queues) == 100

    for queue in queues:  # the console's button and a script, at once
        operators = [Engine(live_engine.config) for _ in range(2)]
        for operator in operators:
            operator.queues.layout(queue)  # each process has read the registry
        barrier = threading.Barrier(2)

        def delete(operator: Engine, queue: str = queue, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            try:
                operator.queues.delete(queue, Actor.cli())
            except DtqError:
                pass  # the other one got there first: fine

        threads = [threading.Thread(target=delete, args=(operator,)) for operator in operators]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    m = scrape()
    assert {q: succeeded(m, q) for q in queues} == dict.fromkeys(queues, 5)
