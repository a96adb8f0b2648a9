"""Finished tasks are kept by outcome (dtq_core/scripts/includes/retain.lua): a compact record for
a succeeded, cancelled or expired task, at most a count of them per queue partition and outcome,
failed and dead-lettered ones whole and longer, so that Redis memory has a bound."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from dtq_core import registry
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.keys import Keys

from .support import tag
from .test_worker_behaviour import make_engine, run_burst

OPERATOR = Actor.cli()
FAILED_ONCE: list[str] = []


@pytest.fixture(autouse=True)
def fail_once_handler() -> Iterator[None]:
    FAILED_ONCE.clear()

    def fail_once(payload: object) -> str:
        if not FAILED_ONCE:
            FAILED_ONCE.append("failed")
            raise ValueError("first run fails")
        return "ok"

    registry.register("test.fail_once", fail_once)
    yield
# The goal's measure: a 66-byte payload ({"message": ...} with 50 characters).
PAYLOAD = {"message": "x" * 50}


def memory(client: redis.Redis, key: str) -> int:
    """MEMORY USAGE of the key as it would be under the default prefix (tests use longer ones)."""
    as_default = Keys("dtq").partition(key.split("{")[1].split("}")[0]) + key.split("}:", 1)[1]
    assert client.copy(key, as_default)
    try:
        return int(client.memory_usage(as_default, samples=0) or 0)
    finally:
        client.delete(as_default)


def task_keys(client: redis.Redis, engine: Engine, ids: list[str]) -> dict[str, bool]:
    return {i: bool(client.exists(engine.keys.task(i))) for i in ids}


def test_a_succeeded_task_keeps_a_compact_record_of_at_most_300_bytes(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    task_id = engine.tasks.enqueue("dtq.echo", PAYLOAD).id
    full = memory(redis_client, engine.keys.task(task_id))
    run_burst(cfg)
    key = engine.keys.task(task_id)
    assert redis_client.object("encoding", key) == "listpack"
    assert memory(redis_client, key) <= 300 < full
    assert cfg.succeeded_retention_s - 60 < redis_client.pttl(key) / 1000 <= cfg.succeeded_retention_s
    task = engine.tasks.get(task_id)
    assert task["id"] == task_id and task["status"] == "SUCCEEDED" and task["compact"]
    assert task["payload"] is None and task["result"] == PAYLOAD and task["errors"] == []
    assert task["attempt"] == 1 and task["max_attempts"] is None and task["worker_id"].startswith("burst-")
    assert task["type"] == "dtq.echo" and task["queue"] == "default" and task["priority"] == "normal"
    assert task["created_at"] <= task["started_at"] <= task["finished_at"] == task["updated_at"]
    assert redis_client.lrange(engine.keys.retain_ok(tag(engine, "default")), 0, -1) == [task_id]


def test_past_the_count_the_oldest_succeeded_tasks_go_with_their_results(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, succeeded_retention_count=5)
    ids = [engine.tasks.enqueue("dtq.echo", {"n": i}).id for i in range(12)]
    run_burst(cfg, concurrency=1)  # finished in submit order
    index = redis_client.lrange(engine.keys.retain_ok(tag(engine, "default")), 0, -1)
    assert index == ids[-5:]
    assert task_keys(redis_client, engine, ids) == {i: i in index for i in ids}
    assert all(redis_client.exists(engine.keys.result(i)) == (i in index) for i in ids)
    assert engine.tasks.get(ids[-1])["result"] == {"n": 11}


def test_failed_tasks_are_kept_whole_longer_and_past_their_own_count(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, succeeded_retention_count=2, failed_retention_count=4, dlq_maxlen=4)
    failed = [engine.tasks.enqueue("dtq.fail", {"retryable": False, "n": i}).id for i in range(6)]
    succeeded = [engine.tasks.enqueue("dtq.echo", {"n": i}).id for i in range(6)]
    run_burst(cfg, concurrency=1)
    kept_failed = [i for i in failed if redis_client.exists(engine.keys.task(i))]
    kept_succeeded = [i for i in succeeded if redis_client.exists(engine.keys.task(i))]
    # Oldest finish first (the tasks of one completion batch share a finish time).
    assert len(kept_failed) == 4 and kept_succeeded == succeeded[-2:]
    index = engine.keys.retain_failed(tag(engine, "default"))
    assert set(redis_client.zrange(index, 0, -1)) == set(kept_failed)
    for task_id in kept_failed:
        task = engine.tasks.get(task_id)
        assert task["status"] == "DEAD_LETTERED" and not task["compact"]
        assert task["payload"]["retryable"] is False and task["errors"]  # what a retry and a reader need
        assert redis_client.pttl(engine.keys.task(task_id)) / 1000 > cfg.succeeded_retention_s
    # The DLQ never offers a dead letter whose record the count removed (its own cap may have
    # evicted another one of the same batch: ties in finish time are broken by id here).
    offered = {e["task_id"] for e in engine.dlq.list(limit=10).items}
    assert offered <= set(kept_failed) and len(offered) >= 3


def test_a_dead_letter_retried_leaves_the_failed_index_and_succeeds_compact(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, failed_retention_count=1, dlq_maxlen=1)
    task_id = engine.tasks.enqueue("test.fail_once", {}, max_attempts=1).id
    run_burst(cfg)
    index = engine.keys.retain_failed(tag(engine, "default"))
    assert engine.tasks.get(task_id)["status"] == "DEAD_LETTERED"
    assert redis_client.zscore(index, task_id) is not None
    assert engine.dlq.retry(DlqSelection(all=True), OPERATOR) == 1
    # Waiting to run again: out of the index, so no later failure's trim can delete it.
    assert redis_client.zscore(index, task_id) is None
    engine.tasks.enqueue("dtq.fail", {"retryable": False}, priority="high")
    run_burst(cfg, concurrency=1)
    task = engine.tasks.get(task_id)
    assert task["status"] == "SUCCEEDED" and task["compact"] and task["result"] == "ok"


def test_cancelled_purged_and_expired_tasks_are_compact_and_counted(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, succeeded_retention_count=2)
    cancelled = engine.tasks.enqueue("dtq.echo", PAYLOAD, queue="ends").id
    engine.tasks.cancel(cancelled, OPERATOR)
    task = engine.tasks.get(cancelled)
    assert task["status"] == "CANCELLED" and task["compact"] and task["payload"] is None
    assert memory(redis_client, engine.keys.task(cancelled)) <= 300
    purged = [engine.tasks.enqueue("dtq.echo", PAYLOAD, queue="ends").id for _ in range(2)]
    assert engine.queues.purge("ends", OPERATOR) == 2
    assert [engine.tasks.get(i)["last_error"] for i in purged] == ["purged", "purged"]
    assert task_keys(redis_client, engine, [cancelled, *purged]) == {cancelled: False, purged[0]: True,
                                                                     purged[1]: True}
    assert redis_client.llen(engine.keys.retain_ok(tag(engine, "ends"))) == 2


def test_keep_payload_all_keeps_succeeded_records_whole(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config, keep_payload="all", succeeded_retention_count=3)
    ids = [engine.tasks.enqueue("dtq.echo", PAYLOAD).id for _ in range(4)]
    run_burst(cfg, concurrency=1)
    task = engine.tasks.get(ids[-1])
    assert task["status"] == "SUCCEEDED" and not task["compact"] and task["payload"] == PAYLOAD
    assert task_keys(redis_client, engine, ids) == {i: i != ids[0] for i in ids}
