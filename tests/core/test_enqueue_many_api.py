"""dtq_tasks.enqueue_many, the Python bulk submit: ids in order, one script call per partition and
100 tasks, every item checked before any is queued, a full queue's refusals reported with the ids
of what was queued, and a Redis that is down."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import redis

import dtq_tasks
from dtq_core.conf import get_engine
from dtq_core.errors import PayloadTooLarge, QueueFull, ValidationError

from .test_scans import _script_calls


def _queued(queue: str) -> int:
    return len(get_engine().tasks.list(queue=queue, limit=500).items)


def test_it_queues_in_order_and_returns_the_ids(redis_server: object, redis_client: redis.Redis) -> None:
    items: list[dict[str, Any]] = [{"type": "dtq.echo", "payload": {"i": i}, "queue": "many"} for i in range(250)]
    items[7]["idempotency_key"] = items[9]["idempotency_key"] = "order-7"  # the second returns the first's id
    items[100] |= {"queue": "other", "priority": "high", "delay_seconds": 30, "headers": {"tenant": "acme"}}
    dtq_tasks.enqueue("dtq.echo", queue="many")  # registers the queue
    dtq_tasks.enqueue("dtq.echo", queue="other")
    before = _script_calls(redis_client)
    ids = dtq_tasks.enqueue_many(items)
    # "many" (one partition): 249 tasks in calls of 100; "other": one task, one single submit.
    assert _script_calls(redis_client) - before == 3 + 1
    assert len(ids) == 250 and ids[9] == ids[7] and len(set(ids)) == 249
    engine = get_engine()
    tasks = [engine.tasks.get(i) for i in ids]
    assert [t["payload"]["i"] for t in tasks] == [7 if i == 9 else i for i in range(250)]
    assert tasks[100]["queue"] == "other" and tasks[100]["status"] == "PENDING" and tasks[100]["priority"] == "high"
    assert tasks[100]["headers"] == {"tenant": "acme"}
    assert _queued("many") == 248 + 1  # 249 items, two of them one task; and the first submit


def test_it_sends_one_write_per_thousand_tasks(redis_server: object, count_writes: Callable[[], list[int]]) -> None:
    dtq_tasks.enqueue("dtq.echo", queue="writes")  # registers the queue, reads the served types
    sends = count_writes()
    ids = dtq_tasks.enqueue_many([{"type": "dtq.echo", "payload": {"i": i}, "queue": "writes"} for i in range(1200)])
    assert len(set(ids)) == 1200
    assert len(sends) == 2  # 1,000 tasks, then 200


@pytest.mark.parametrize(("item", "message", "field"), [
    ({"type": "dtq.echo", "queue": "BAD"}, "tasks[1]: queue must match", "tasks[1].queue"),
    ({"payload": {"a": 1}}, "tasks[1]: type is required", "tasks[1].type"),
    ({"type": "dtq.echo", "colour": "red"}, "tasks[1]: unknown argument 'colour'", "tasks[1].colour"),
    ("dtq.echo", "tasks[1]: an item must be a mapping of enqueue's arguments, not str", None),
    ({"type": "dtq.echo", "max_attempts": "lots"}, "tasks[1]: max_attempts", "tasks[1].max_attempts"),
])
def test_a_bad_item_is_named_by_its_index_and_nothing_is_queued(redis_server: object, item: Any, message: str,
                                                                field: str | None) -> None:
    with pytest.raises(ValidationError) as refused:
        dtq_tasks.enqueue_many([{"type": "dtq.echo", "queue": "checked"}, item, {"type": "dtq.echo"}])
    assert str(refused.value).startswith(message) and refused.value.field == field
    assert _queued("checked") == 0


def test_an_oversized_payload_is_refused_before_anything_is_queued(redis_server: object, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "PAYLOAD_MAX_BYTES": 1000}
    with pytest.raises(PayloadTooLarge, match=r"^tasks\[2\]: payload is \d+ bytes; the limit is 1000"):
        dtq_tasks.enqueue_many([{"type": "dtq.echo", "queue": "big"}] * 2 + [{"type": "dtq.echo", "queue": "big",
                                                                             "payload": "x" * 2000}])
    assert _queued("big") == 0


def test_a_full_queue_refuses_items_alone_and_says_which(redis_server: object, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "MAX_QUEUE_DEPTH": 2}
    items = [{"type": "dtq.echo", "payload": {"i": i}, "queue": "full"} for i in range(3)]
    items.append({"type": "dtq.echo", "queue": "full", "delay_seconds": 60})  # a delayed task passes the gate
    with pytest.raises(QueueFull) as full:
        dtq_tasks.enqueue_many(items)
    ids = full.value.details["ids"]
    assert ids[2] is None and all(ids[i] for i in (0, 1, 3))
    assert [get_engine().tasks.get(ids[i])["status"] for i in (0, 1, 3)] == ["QUEUED", "QUEUED", "PENDING"]
    assert full.value.details["queue"] == "full"


def test_a_redis_failure_in_a_later_round_raises_with_the_ids_already_queued(
        redis_server: object, redis_client: redis.Redis) -> None:
    # Once, the 1,000 tasks of the first round were queued and their ids lost with the error.
    engine = get_engine()
    layout = engine.registry.ensure("rounds")
    redis_client.hset(engine.keys.partition(layout.tag_for("bad")) + "idem:bad", "x", "1")  # WRONGTYPE
    items: list[dict[str, Any]] = [{"type": "dtq.echo", "payload": i, "queue": "rounds"} for i in range(2500)]
    items[1200]["idempotency_key"] = "bad"  # in the second round of 1,000
    with pytest.raises(redis.ResponseError, match="WRONGTYPE") as failed:
        dtq_tasks.enqueue_many(items)
    ids = failed.value.details["ids"]  # type: ignore[attr-defined]
    assert len(ids) == 2500 and ids[1200] is None and ids[2000:] == [None] * 500  # the third round not sent
    landed = [i for i in range(2000) if i != 1200]
    assert all(ids[i] for i in landed)
    assert [engine.tasks.get(ids[i])["payload"] for i in (0, 999, 1000, 1999)] == [0, 999, 1000, 1999]
    assert engine.queues.get("rounds")["waiting"] == len(landed)


def test_an_empty_batch_is_no_call() -> None:
    assert dtq_tasks.enqueue_many([]) == []  # the settings point at a closed port: nothing was sent


def test_a_redis_that_is_down_raises_as_enqueue_does() -> None:
    # The autouse settings point at 127.0.0.1:1, where nothing listens.
    with pytest.raises(redis.ConnectionError, match="127.0.0.1:1"):
        dtq_tasks.enqueue("dtq.echo")
    with pytest.raises(redis.ConnectionError, match="127.0.0.1:1"):
        dtq_tasks.enqueue_many([{"type": "dtq.echo"}])
