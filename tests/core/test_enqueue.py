"""Submit: validation, streams and schedule, idempotency keys, the depth gate."""

from __future__ import annotations

import json

import pytest
import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import PayloadTooLarge, QueueFull, TaskNotFound, ValidationError
from dtq_core.keys import Keys


def test_it_queues_a_task_in_its_priority_stream(engine: Engine, redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo", {"x": 1}, queue="emails", priority="high")
    assert out.created and out.status == "QUEUED"
    entries = redis_client.xrange(engine.keys.stream("emails", "high"))
    assert [fields for _, fields in entries] == [{"task_id": out.id, "attempt": "1"}]
    task = engine.tasks.get(out.id)
    assert task["status"] == "QUEUED" and task["payload"] == {"x": 1} and task["attempt"] == 0
    assert task["queue"] == "emails" and task["priority"] == "high" and task["max_attempts"] == 5
    assert task["created_at"].endswith("Z") and task["errors"] == []
    assert redis_client.sismember(engine.keys.queues(), "emails")
    groups = redis_client.xinfo_groups(engine.keys.stream("emails", "low"))
    assert [g["name"] for g in groups] == [Keys.GROUP]  # every priority stream gets the group


def test_the_task_hash_has_the_retention_ttl(engine: Engine, redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo")
    ttl = redis_client.ttl(engine.keys.task(out.id))
    assert engine.config.task_retention_s - 5 < ttl <= engine.config.task_retention_s


def test_a_delayed_task_waits_pending_in_the_schedule(engine: Engine, redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo", delay_seconds=30)
    assert out.status == "PENDING"
    score = redis_client.zscore(engine.keys.schedule(), out.id)
    assert score == engine.clock.now_ms() + 30_000
    assert redis_client.xlen(engine.keys.stream("default", "normal")) == 0
    assert engine.queues.stats(["default"])[0]["retry_scheduled"] == 1


def test_the_same_idempotency_key_returns_the_first_task(engine: Engine, redis_client: redis.Redis) -> None:
    first = engine.tasks.enqueue("dtq.echo", {"n": 1}, idempotency_key="order-42")
    second = engine.tasks.enqueue("dtq.echo", {"n": 2}, idempotency_key="order-42")
    assert first.created and not second.created and second.id == first.id
    assert redis_client.xlen(engine.keys.stream("default", "normal")) == 1
    ttl = redis_client.ttl(engine.keys.idem("order-42"))
    assert engine.config.idem_ttl_s - 5 < ttl <= engine.config.idem_ttl_s


def test_a_delayed_task_keeps_its_idempotency_key_through_its_delay(engine: Engine, redis_client: redis.Redis) -> None:
    # A key that expired while its task still waited would let a resubmit create a second task.
    delay = engine.config.idem_ttl_s * 2
    first = engine.tasks.enqueue("dtq.echo", {"n": 1}, idempotency_key="report-9", delay_seconds=delay)
    ttl = redis_client.ttl(engine.keys.idem("report-9"))
    assert delay + engine.config.idem_ttl_s - 5 < ttl <= delay + engine.config.idem_ttl_s
    assert engine.tasks.enqueue("dtq.echo", {"n": 2}, idempotency_key="report-9").id == first.id


def test_the_depth_gate_refuses_with_queue_full(config: DtqConfig) -> None:
    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUE_DEPTH": 3}))
    for priority in ("high", "normal", "low"):
        engine.tasks.enqueue("dtq.echo", priority=priority)  # the gate sums all three streams
    with pytest.raises(QueueFull) as excinfo:
        engine.tasks.enqueue("dtq.echo")
    assert excinfo.value.details["depth"] == 3
    assert engine.tasks.enqueue("dtq.echo", delay_seconds=5).status == "PENDING"  # delayed tasks bypass it
    assert engine.tasks.enqueue("dtq.echo", queue="other").created  # the gate is per queue


def test_a_gate_of_zero_is_off(config: DtqConfig) -> None:
    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUE_DEPTH": 0}))
    for _ in range(5):
        engine.tasks.enqueue("dtq.echo")


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"type": ""}, "type"), ({"type": 5}, "type"), ({"type": "a b"}, "type"),
        ({"queue": "Bad Queue"}, "queue"), ({"queue": "dlq"}, "queue"), ({"queue": "x" * 65}, "queue"),
        ({"priority": "urgent"}, "priority"), ({"delay_seconds": -1}, "delay_seconds"),
        ({"delay_seconds": "5"}, "delay_seconds"), ({"delay_seconds": float("nan")}, "delay_seconds"),
        ({"ttl_seconds": 0}, "ttl_seconds"), ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1.5}, "max_attempts"), ({"max_attempts": True}, "max_attempts"),
        ({"timeout_seconds": -3}, "timeout_seconds"), ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "k" * 201}, "idempotency_key"), ({"payload": {1, 2}}, "payload"),
        # Lone surrogates (bytes decoded with surrogateescape, or "\ud800" in JSON) and deep nesting
        ({"payload": {"name": "caf\udce9"}}, "payload"), ({"idempotency_key": "k\ud800"}, "idempotency_key"),
        ({"payload": _nested(5000)}, "payload"),
        # Counted from the submit, a ttl no longer than the delay expires the task before it is due.
        ({"delay_seconds": 60, "ttl_seconds": 60}, "ttl_seconds"),
        ({"delay_seconds": 60, "ttl_seconds": 30}, "ttl_seconds"),
        ({"delay_seconds": 1.0005, "ttl_seconds": 1.0009}, "ttl_seconds"),  # the same millisecond
    ],
)
def test_bad_input_is_refused_naming_the_field_and_stores_nothing(
        engine: Engine, redis_client: redis.Redis, kwargs: dict[str, object], field: str) -> None:
    args = {"type": "dtq.echo", **kwargs}
    with pytest.raises(ValidationError) as excinfo:
        engine.tasks.enqueue(args.pop("type"), **args)
    assert excinfo.value.field == field
    assert list(redis_client.scan_iter(match=f"{engine.keys.prefix}:*")) == []


def test_an_oversized_payload_is_refused(engine: Engine) -> None:
    big = {"blob": "x" * engine.config.payload_max_bytes}
    with pytest.raises(PayloadTooLarge, match="DTQ_PAYLOAD_MAX_BYTES"):
        engine.tasks.enqueue("dtq.echo", big)


def test_enqueue_many_keeps_order_and_reports_a_full_queue(config: DtqConfig) -> None:
    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUE_DEPTH": 2}))
    subs = [engine.tasks.validate("dtq.echo", {"i": i}) for i in range(3)]
    out = engine.tasks.enqueue_many(subs)
    assert [getattr(o, "status", None) for o in out[:2]] == ["QUEUED", "QUEUED"]
    assert isinstance(out[2], QueueFull)
    assert [engine.tasks.get(o.id)["payload"]["i"] for o in out[:2]] == [0, 1]


def test_unknown_ids_are_not_found(engine: Engine) -> None:
    for bad in ("nope", "", "a:b", "x" * 300):
        with pytest.raises(TaskNotFound):
            engine.tasks.get(bad)


def test_every_state_change_publishes_an_event(engine: Engine, redis_client: redis.Redis) -> None:
    pubsub = redis_client.pubsub()
    pubsub.subscribe(engine.keys.events())
    pubsub.get_message(timeout=1)
    out = engine.tasks.enqueue("dtq.echo", queue="evq")
    engine.tasks.cancel(out.id, Actor.cli())
    events = []
    while len(events) < 2:
        message = pubsub.get_message(timeout=2)
        assert message is not None, "missing event"
        if message["type"] == "message":
            events.append(json.loads(message["data"]))
    assert [(e["type"], e["status"]) for e in events] == [("task.queued", "QUEUED"), ("task.cancelled", "CANCELLED")]
    assert {e["task_id"] for e in events} == {out.id} and {e["queue"] for e in events} == {"evq"}
    assert events[0]["event_id"] != events[1]["event_id"]
    assert set(events[0]) == {"event_id", "type", "task_id", "queue", "status", "attempt", "ts"}
    pubsub.close()


def test_a_cancelled_queued_task_leaves_the_depth_gate(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUE_DEPTH": 2}))
    first = engine.tasks.enqueue("dtq.echo").id
    engine.tasks.enqueue("dtq.echo")
    with pytest.raises(QueueFull):
        engine.tasks.enqueue("dtq.echo")
    engine.tasks.cancel(first, Actor.cli())
    assert redis_client.xlen(engine.keys.stream("default", "normal")) == 1
    assert engine.tasks.enqueue("dtq.echo").status == "QUEUED"  # the cancelled task's slot is free again


def test_an_enqueue_for_the_id_alone_skips_the_record(engine: Engine) -> None:
    # dtq_tasks.enqueue only returns the id: the script need not read the task back.
    out = engine.tasks.enqueue("dtq.echo", {"x": 1}, record=False)
    assert out.created and out.status == "QUEUED" and out.task is None
    assert engine.tasks.get(out.id)["payload"] == {"x": 1}


def test_the_recent_tasks_index_keeps_the_newest_up_to_its_cap(engine: Engine, redis_client: redis.Redis,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import dtq_core.engine.tasks as engine_module

    monkeypatch.setattr(engine_module, "RECENT_CAP", 3)
    ids = []
    for _ in range(5):
        ids.append(engine.tasks.enqueue("dtq.echo").id)
        engine.clock.advance(0.01)  # distinct scores: the index is ordered by submit time
    assert redis_client.zrange(engine.keys.recent(), 0, -1) == ids[-3:]
