"""Queues are bounded (DTQ_MAX_QUEUES, checked in the enqueue script) and an empty one can be deleted
(audited, all of its keys at once; refused while anything of it waits, runs or is scheduled)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

import dtq_tasks
from dtq_core.clock import SystemClock
from dtq_core.config import ConfigError, DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import QueueLimitReached, QueueNotEmpty, QueueNotFound
from dtq_core.keys import Keys
from dtq_core.worker.store import WorkerStore

from ..conftest import WorkerProcess, wait_for


def _bounded(config: DtqConfig, most: int) -> Engine:
    return Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUES": most}))


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


def _queue_keys(client: redis.Redis, keys: Keys, queue: str) -> dict[str, object]:
    return {"known": client.sismember(keys.queues(), queue), "paused": client.sismember(keys.paused(), queue),
            "paused_info": client.hexists(keys.paused_info(), queue), "ready": client.sismember(keys.ready(), queue),
            "streams": client.exists(*keys.streams(queue)), "wake": client.exists(keys.wake(queue))}


def test_delete_removes_an_empty_queue_at_once_and_is_audited(engine: Engine, redis_client: redis.Redis) -> None:
    task_id = engine.tasks.enqueue("dtq.echo", queue="junk").id
    engine.queues.pause("junk", Actor.cli())
    engine.tasks.cancel(task_id, Actor.cli())  # nothing left in it
    engine.queues.delete("junk", Actor.cli())
    assert _queue_keys(redis_client, engine.keys, "junk") == {
        "known": False, "paused": False, "paused_info": False, "ready": False, "streams": 0, "wake": 0}
    with pytest.raises(QueueNotFound):
        engine.queues.get("junk")
    assert [q["name"] for q in engine.queues.stats()] == []
    entry = engine.audit.list().items[0]
    assert (entry["action"], entry["target"], entry["count"]) == ("queue.delete", "queue:junk", 1)
    with pytest.raises(QueueNotFound):
        engine.queues.delete("junk", Actor.cli())
    # A new submit creates it again, from scratch (not paused).
    assert engine.tasks.enqueue("dtq.echo", queue="junk").created
    assert engine.queues.get("junk")["paused"] is False and engine.queues.get("junk")["waiting"] == 1


def test_delete_frees_room_under_the_bound(config: DtqConfig) -> None:
    engine = _bounded(config, 1)
    engine.tasks.enqueue("dtq.echo", queue="old", delay_seconds=0)
    engine.queues.purge("old", Actor.cli())
    with pytest.raises(QueueLimitReached):
        engine.tasks.enqueue("dtq.echo", queue="new")
    engine.queues.delete("old", Actor.cli())
    assert engine.tasks.enqueue("dtq.echo", queue="new").created


def test_delete_refuses_a_queue_with_waiting_scheduled_or_running_tasks(engine: Engine, config: DtqConfig,
                                                                        redis_client: redis.Redis) -> None:
    waiting = engine.tasks.enqueue("dtq.echo", queue="busy").id
    with pytest.raises(QueueNotEmpty, match="1 waiting, 0 in flight, 0 scheduled") as refused:
        engine.queues.delete("busy", Actor.cli())
    assert refused.value.code == "QUEUE_NOT_EMPTY" and refused.value.http_status == 409
    engine.tasks.cancel(waiting, Actor.cli())
    later = engine.tasks.enqueue("dtq.echo", queue="busy", delay_seconds=600).id
    with pytest.raises(QueueNotEmpty, match="0 waiting, 0 in flight, 1 scheduled"):
        engine.queues.delete("busy", Actor.cli())
    engine.tasks.cancel(later, Actor.cli())

    # Delivered to a worker and not yet finished: in flight.
    engine.tasks.enqueue("dtq.sleep", {"seconds": 30}, queue="busy")

    async def claim() -> None:
        store = WorkerStore(config, async_client(config, read_timeout_s=10), SystemClock(), "holder")
        try:
            assert len(await store.fetch(["busy"], 1)) == 1
        finally:
            await store.aclose()

    asyncio.run(claim())
    with pytest.raises(QueueNotEmpty, match="0 waiting, 1 in flight, 0 scheduled"):
        engine.queues.delete("busy", Actor.cli())
    assert redis_client.sismember(engine.keys.queues(), "busy")
    # Refusals change nothing, so leave no entry (the two cancels above are audited).
    assert [e["action"] for e in engine.audit.list().items] == ["task.cancel", "task.cancel"]


def test_delete_refuses_a_queue_whose_due_tasks_the_scheduler_has_claimed(engine: Engine,
                                                                           redis_client: redis.Redis) -> None:
    # It should count a due task the leader took from the schedule and has not queued yet: a leader
    # that died between its two scripts holds such claims until the stale-claim reaper returns them,
    # and deleting the queue meanwhile would leave those tasks in a queue nobody knows.
    task_id = engine.tasks.enqueue("dtq.echo", queue="claimed", delay_seconds=1).id
    k = engine.keys
    redis_client.set(k.scheduler_lock(), "leader")
    due = engine.clock.now_ms() + 5000
    assert engine.scripts("claimDue", keys=[k.schedule(), k.schedule_claims(), k.scheduler_lock(), k.task_prefix()],
                          args=["leader", due, 10]) == [task_id]
    with pytest.raises(QueueNotEmpty, match="0 waiting, 0 in flight, 1 scheduled"):
        engine.queues.delete("claimed", Actor.cli())
    assert redis_client.sismember(k.queues(), "claimed")


@pytest.mark.slow
def test_a_worker_serving_a_deleted_queue_serves_it_again_once_a_submit_recreates_it(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    worker = start_worker("--queues", "gone", "--name", "gone-w")
    first = engine.tasks.enqueue("dtq.echo", queue="gone").id
    wait_for(lambda: engine.tasks.get(first)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
    engine.queues.delete("gone", Actor.cli())
    assert not redis_client.exists(*engine.keys.streams("gone"))
    # The running worker keeps waiting on the queue; a submit creates it anew and rings it.
    second = engine.tasks.enqueue("dtq.echo", queue="gone").id
    wait_for(lambda: engine.tasks.get(second)["status"] == "SUCCEEDED", timeout=30, message=worker.output)
    assert worker.proc.poll() is None
