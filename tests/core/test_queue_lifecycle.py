"""Queues are bounded (DTQ_MAX_QUEUES, checked when a queue is registered) and an empty one can be
deleted (audited; every partition or none; refused while anything of it waits, runs, is scheduled
or is dead-lettered)."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
import redis

import dtq_tasks
from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.registry import TOMBSTONE_TTL_S
from dtq_core.errors import QueueLimitReached, QueueNotEmpty, QueueNotFound
from dtq_core.keys import Keys, tag_of
from dtq_core.metrics import read_snapshot

from ..api.support import make_dead_letters
from ..conftest import WorkerProcess, wait_for


def _bounded(config: DtqConfig, most: int) -> Engine:
    return Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUES": most}))


def _partitioned(config: DtqConfig, **queues: int) -> Engine:
    spec = ",".join(f"{queue}={n}" for queue, n in queues.items())
    return Engine(DtqConfig.from_mapping({**config.as_settings(), "QUEUE_PARTITIONS": spec}))


def test_a_submit_to_a_new_queue_past_the_bound_is_refused(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine = _bounded(config, 3)
    for queue in ("a", "b", "c"):
        engine.tasks.enqueue("dtq.echo", queue=queue)
    with pytest.raises(QueueLimitReached) as refused:
        engine.tasks.enqueue("dtq.echo", queue="d")
    assert refused.value.code == "QUEUE_LIMIT_REACHED" and refused.value.http_status == 409
    assert "DTQ_MAX_QUEUES" in refused.value.message and refused.value.details["limit"] == 3
    with pytest.raises(QueueLimitReached):  # a delayed task would create the queue too
        engine.tasks.enqueue("dtq.echo", queue="d", delay_seconds=60)
    assert engine.tasks.enqueue("dtq.echo", queue="a").created  # existing queues still take tasks
    assert set(redis_client.hkeys(engine.keys.queues())) == {"a", "b", "c"}  # "d" has no partition either
    # A batch gets the error per item, the rest goes in.
    outcomes = engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue=q) for q in ("b", "e", "c")])
    assert [type(o).__name__ for o in outcomes] == ["Enqueued", "QueueLimitReached", "Enqueued"]


def test_concurrent_submits_to_new_queues_cannot_overshoot_the_bound(config: DtqConfig,
                                                                      redis_client: redis.Redis) -> None:
    engine = _bounded(config, 5)

    def submit(n: int) -> bool:
        try:
            engine.tasks.enqueue("dtq.echo", queue=f"q{n}")
            return True
        except QueueLimitReached:
            return False

    with ThreadPoolExecutor(max_workers=16) as pool:
        accepted = sum(pool.map(submit, range(60)))
    assert accepted == 5 and redis_client.hlen(engine.keys.queues()) == 5


def test_dtq_tasks_enqueue_raises_the_limit_error(config: DtqConfig, settings: object) -> None:
    settings.DTQ = {**settings.DTQ, "MAX_QUEUES": 1}  # type: ignore[attr-defined]
    dtq_tasks.enqueue("dtq.echo", queue="only")
    with pytest.raises(QueueLimitReached, match="DTQ_MAX_QUEUES"):
        dtq_tasks.enqueue("dtq.echo", queue="another")


@pytest.mark.parametrize("raw", ["-1", "lots"])
def test_the_bound_is_validated(raw: str) -> None:
    from dtq_core.config import read_env

    with pytest.raises(ConfigError, match="DTQ_MAX_QUEUES"):
        read_env({"DTQ_MAX_QUEUES": raw}.get)


def test_a_bound_of_zero_is_off(config: DtqConfig) -> None:
    engine = _bounded(config, 0)
    for n in range(5):
        engine.tasks.enqueue("dtq.echo", queue=f"free{n}")


def _partition_keys(client: redis.Redis, keys: Keys, tag: str) -> list[str]:
    """The keys of a partition (its prefix's), but its tasks' records, which expire on their own."""
    return sorted(key for key in client.scan_iter(match=f"{keys.partition(tag)}*", count=1000)
                  if not key.startswith(f"{keys.partition(tag)}task:"))


def test_delete_removes_an_empty_queue_at_once_and_is_audited(engine: Engine, redis_client: redis.Redis) -> None:
    task_id = engine.tasks.enqueue("dtq.echo", queue="junk").id
    layout = engine.registry.get("junk", fresh=True)
    assert layout is not None
    engine.queues.pause("junk", Actor.cli())
    engine.tasks.cancel(task_id, Actor.cli())  # nothing left in it
    engine.queues.delete("junk", Actor.cli())
    assert not redis_client.hexists(engine.keys.queues(), "junk")
    assert not redis_client.hexists(engine.keys.paused_index(), "junk")
    (tag,) = layout.all_tags
    # All that is left of the partition is its owner, now a tombstone that expires.
    assert _partition_keys(redis_client, engine.keys, tag) == [engine.keys.owner(tag)]
    assert redis_client.get(engine.keys.owner(tag)) == f"deleted|junk|{layout.epoch}"
    assert 0 < redis_client.ttl(engine.keys.owner(tag)) <= TOMBSTONE_TTL_S
    assert engine.tasks.get(task_id)["status"] == "CANCELLED"  # a task stays readable by id
    with pytest.raises(QueueNotFound):
        engine.queues.get("junk")
    assert [q["name"] for q in engine.queues.stats()] == []
    entry = engine.audit.list().items[0]
    assert (entry["action"], entry["target"], entry["count"]) == ("queue.delete", "queue:junk", 1)
    with pytest.raises(QueueNotFound):
        engine.queues.delete("junk", Actor.cli())
    # A new submit creates it again, from scratch (not paused), as a new life of the queue.
    assert engine.tasks.enqueue("dtq.echo", queue="junk").created
    assert engine.queues.get("junk")["paused"] is False and engine.queues.get("junk")["waiting"] == 1
    again = engine.registry.get("junk", fresh=True)
    assert again is not None and again.epoch != layout.epoch


def test_delete_frees_room_under_the_bound(config: DtqConfig) -> None:
    engine = _bounded(config, 1)
    engine.tasks.enqueue("dtq.echo", queue="old", delay_seconds=0)
    engine.queues.purge("old", Actor.cli())
    with pytest.raises(QueueLimitReached):
        engine.tasks.enqueue("dtq.echo", queue="new")
    engine.queues.delete("old", Actor.cli())
    assert engine.tasks.enqueue("dtq.echo", queue="new").created


def test_delete_refuses_a_queue_with_waiting_scheduled_or_running_tasks(engine: Engine,
                                                                        redis_client: redis.Redis) -> None:
    waiting = engine.tasks.enqueue("dtq.echo", queue="busy").id
    with pytest.raises(QueueNotEmpty, match="1 waiting, 0 in flight, 0 scheduled;") as refused:
        engine.queues.delete("busy", Actor.cli())
    assert refused.value.code == "QUEUE_NOT_EMPTY" and refused.value.http_status == 409
    engine.tasks.cancel(waiting, Actor.cli())
    later = engine.tasks.enqueue("dtq.echo", queue="busy", delay_seconds=600).id
    with pytest.raises(QueueNotEmpty, match="0 waiting, 0 in flight, 1 scheduled"):
        engine.queues.delete("busy", Actor.cli())
    engine.tasks.cancel(later, Actor.cli())

    # Delivered to a worker (read by its consumer) and not yet finished: in flight.
    held = engine.tasks.enqueue("dtq.sleep", {"seconds": 30}, queue="busy").id
    stream = engine.keys.stream(tag_of(held), "busy", "normal")
    assert redis_client.xreadgroup(Keys.GROUP, "holder", {stream: ">"}, count=1)
    with pytest.raises(QueueNotEmpty, match="0 waiting, 1 in flight, 0 scheduled"):
        engine.queues.delete("busy", Actor.cli())
    assert redis_client.hexists(engine.keys.queues(), "busy")
    # Refusals change nothing, so leave no entry (the two cancels above are audited).
    assert [e["action"] for e in engine.audit.list().items] == ["task.cancel", "task.cancel"]


def test_delete_refuses_a_queue_whose_due_tasks_the_scheduler_has_claimed(engine: Engine,
                                                                           redis_client: redis.Redis) -> None:
    # It should count a due task the leader took from the schedule and has not queued yet: a leader
    # that died between its two scripts holds such claims until the stale-claim reaper returns them,
    # and deleting the queue meanwhile would leave those tasks in a queue nobody knows.
    task_id = engine.tasks.enqueue("dtq.echo", queue="claimed", delay_seconds=1).id
    k, tag = engine.keys, tag_of(task_id)
    # What the leader's claim leaves: the task moved from the schedule to its claims.
    assert redis_client.zrem(k.schedule(tag), task_id) == 1
    redis_client.zadd(k.schedule_claims(tag), {task_id: engine.clock.now_ms()})
    with pytest.raises(QueueNotEmpty, match="0 waiting, 0 in flight, 1 scheduled"):
        engine.queues.delete("claimed", Actor.cli())
    assert redis_client.hexists(k.queues(), "claimed")


def test_delete_refuses_a_queue_with_dead_letters(live_engine: Engine) -> None:
    # A deleted queue's dead letters could be neither listed nor retried: they are its content too.
    make_dead_letters(live_engine, 2, queue="failing")
    with pytest.raises(QueueNotEmpty, match="0 waiting, 0 in flight, 0 scheduled, 2 dead-lettered; .*"
                                            "retry or discard its dead letters first"):
        live_engine.queues.delete("failing", Actor.cli())
    assert live_engine.dlq.count() == 2 and live_engine.queues.get("failing")["dlq"] == 2


def test_a_partitioned_queue_is_deleted_whole_or_not_at_all(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine = _partitioned(config, wide=3)
    ids = [engine.tasks.enqueue("dtq.echo", queue="wide").id for _ in range(6)]
    layout = engine.registry.get("wide", fresh=True)
    assert layout is not None and len(layout.tags) == 3 and {tag_of(i) for i in ids} == set(layout.tags)
    for task_id in ids[:-1]:
        engine.tasks.cancel(task_id, Actor.cli())
    # One partition still holds a task: the others were closed, then opened again.
    with pytest.raises(QueueNotEmpty, match="1 waiting, 0 in flight, 0 scheduled"):
        engine.queues.delete("wide", Actor.cli())
    assert [redis_client.get(engine.keys.owner(tag)) for tag in layout.tags] == [layout.owner] * 3
    assert all(engine.tasks.enqueue("dtq.echo", queue="wide").created for _ in range(3))  # each takes work
    engine.queues.purge("wide", Actor.cli())
    engine.queues.delete("wide", Actor.cli())
    assert [redis_client.get(engine.keys.owner(tag)) for tag in layout.tags] == [f"deleted|{layout.owner}"] * 3
    assert not redis_client.hexists(engine.keys.queues(), "wide")


def test_a_deleted_queues_counts_stay_in_the_metrics(config: DtqConfig, redis_client: redis.Redis) -> None:
    # Counters that went back down would read as a reset to Prometheus: a deleted queue's
    # partitions fold their counts into the global ones.
    engine = _partitioned(config, wide=2)
    for _ in range(4):
        engine.tasks.cancel(engine.tasks.enqueue("dtq.echo", queue="wide").id, Actor.cli())

    def snapshot() -> Any:
        return read_snapshot(redis_client, engine.keys, engine.scripts, alive_window_ms=30_000)

    before = snapshot()
    assert before.tasks[("wide", "dtq.echo", "cancelled")] == 4
    engine.queues.delete("wide", Actor.cli())
    after = snapshot()
    assert after.queues == [] and after.tasks == before.tasks and after.counters == before.counters


@pytest.mark.slow
def test_a_worker_serving_a_deleted_queue_serves_it_again_once_a_submit_recreates_it(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--queues", "gone", "--name", "gone-w")
    first = engine.tasks.enqueue("dtq.echo", queue="gone").id
    wait_for(lambda: engine.tasks.get(first)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
    (tag,) = engine.registry.get("gone", fresh=True).all_tags  # type: ignore[union-attr]
    engine.queues.delete("gone", Actor.cli())
    assert not redis_client.exists(*engine.keys.streams(tag, "gone"))
    # The running worker keeps waiting on the queue; a submit creates it anew and rings it.
    second = engine.tasks.enqueue("dtq.echo", queue="gone").id
    wait_for(lambda: engine.tasks.get(second)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
    assert worker.proc.poll() is None


def test_an_action_on_a_layout_gone_stale_reads_the_registry_again(engine: Engine, redis_client: redis.Redis,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The queue was deleted and created again (a new epoch) between the operator's read of the
    # registry and the scripts: its partitions refuse the old layout (their owner names the new
    # life), and the action reads the registry again and goes to the queue's new life.
    engine.tasks.cancel(engine.tasks.enqueue("dtq.echo", queue="again").id, Actor.cli())
    old = engine.registry.get("again", fresh=True)
    engine.queues.delete("again", Actor.cli())
    engine.tasks.enqueue("dtq.echo", queue="again")
    new = engine.registry.get("again", fresh=True)
    assert old is not None and new is not None and new.epoch != old.epoch
    reads = iter([old])
    real_get = engine.registry.get
    monkeypatch.setattr(engine.registry, "get", lambda queue, **kw: next(reads, None) or real_get(queue, **kw))
    assert engine.queues.pause("again", Actor.cli()) is True
    assert engine.queues.get("again")["paused"] is True
    assert [redis_client.get(engine.keys.owner(tag)) for tag in new.all_tags] == [new.owner] * len(new.all_tags)
