"""Submit: validation, streams and schedule, idempotency keys, the depth gate."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import pytest
import redis
import redis.cluster
from redis.crc import key_slot

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import PayloadTooLarge, QueueFull, TaskNotFound, ValidationError
from dtq_core.events import announce
from dtq_core.keys import Keys, is_task_id, tag_of
from dtq_core.submit import MAX_JSON_DEPTH

from .test_scans import _script_calls


def test_it_queues_a_task_in_its_priority_stream(engine: Engine, redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo", {"x": 1}, queue="emails", priority="high")
    assert out.created and out.status == "QUEUED"
    tag = tag_of(out.id)  # the id names the partition the task went to
    assert is_task_id(out.id) and len(out.id) <= 64 and engine.registry.get("emails").tags == (tag,)
    entries = redis_client.xrange(engine.keys.stream(tag, "emails", "high"))
    assert [fields for _, fields in entries] == [{"task_id": out.id, "attempt": "1"}]
    task = engine.tasks.get(out.id)
    assert task["id"] == out.id and task["status"] == "QUEUED" and task["payload"] == {"x": 1}
    assert task["queue"] == "emails" and task["priority"] == "high" and task["max_attempts"] == 5
    assert task["created_at"].endswith("Z") and task["errors"] == [] and task["attempt"] == 0
    assert redis_client.hexists(engine.keys.queues(), "emails")
    groups = redis_client.xinfo_groups(engine.keys.stream(tag, "emails", "low"))
    assert [g["name"] for g in groups] == [Keys.GROUP]  # every priority stream gets the group



def test_the_record_leaves_out_fields_at_their_default_and_the_api_shows_them(engine: Engine,
                                                                              redis_client: redis.Redis) -> None:
    # A lean record (issue 20): every field read walks the hash, so a field whose value is the one
    # a reader takes for a missing field is not written; the API shows the same task either way.
    out = engine.tasks.enqueue("dtq.echo", {"x": 1}, queue="emails")
    record = redis_client.hgetall(engine.keys.task(out.id))
    assert not {"id", "cancel_requested", "errors", "result_truncated", "expires_at", "idempotency_key",
                "request_id"} & set(record)
    assert {"status", "attempt", "type", "queue", "priority", "payload", "max_attempts", "timeout_s",
            "created_at", "entry_id"} <= set(record)
    shown = out.task
    assert shown is not None and shown == engine.tasks.get(out.id)
    assert shown["id"] == out.id and shown["errors"] == [] and shown["expires_at"] is None
    assert shown["cancel_requested"] is False and shown["result_truncated"] is False
    assert shown["idempotency_key"] is None and shown["request_id"] is None
    given = engine.tasks.enqueue("dtq.echo", {"x": 2}, queue="emails", ttl_seconds=60, idempotency_key="k-1",
                                 request_id="r-1")
    record = redis_client.hgetall(engine.keys.task(given.id))
    assert record["idempotency_key"] == "k-1" and record["request_id"] == "r-1" and record["expires_at"]
    assert given.task is not None and given.task["idempotency_key"] == "k-1" and given.task["request_id"] == "r-1"

def test_the_task_hash_has_the_retention_ttl(engine: Engine, redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo")
    ttl = redis_client.ttl(engine.keys.task(out.id))
    assert engine.config.task_retention_s - 5 < ttl <= engine.config.task_retention_s


def test_a_delayed_task_waits_pending_in_the_schedule(engine: Engine, redis_client: redis.Redis) -> None:
    out = engine.tasks.enqueue("dtq.echo", delay_seconds=30)
    assert out.status == "PENDING"
    tag = tag_of(out.id)
    score = redis_client.zscore(engine.keys.schedule(tag), out.id)
    assert score == engine.clock.now_ms() + 30_000
    assert redis_client.xlen(engine.keys.stream(tag, "default", "normal")) == 0
    assert redis_client.hget(engine.keys.schedule_counts(tag), "default") == "1"
    assert engine.queues.stats(["default"])[0]["retry_scheduled"] == 1


def test_the_same_idempotency_key_returns_the_first_task(engine: Engine, redis_client: redis.Redis) -> None:
    first = engine.tasks.enqueue("dtq.echo", {"n": 1}, idempotency_key="order-42")
    second = engine.tasks.enqueue("dtq.echo", {"n": 2}, idempotency_key="order-42")
    assert first.created and not second.created and second.id == first.id
    tag = tag_of(first.id)
    assert redis_client.xlen(engine.keys.stream(tag, "default", "normal")) == 1
    ttl = redis_client.ttl(engine.keys.idem(tag, "order-42"))
    assert engine.config.idem_ttl_s - 5 < ttl <= engine.config.idem_ttl_s


def test_a_delayed_task_keeps_its_idempotency_key_through_its_delay(engine: Engine, redis_client: redis.Redis) -> None:
    # A key that expired while its task still waited would let a resubmit create a second task.
    delay = engine.config.idem_ttl_s * 2
    first = engine.tasks.enqueue("dtq.echo", {"n": 1}, idempotency_key="report-9", delay_seconds=delay)
    ttl = redis_client.ttl(engine.keys.idem(tag_of(first.id), "report-9"))
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
        # Past MAX_JSON_DEPTH (the API's limit too), though json.dumps could still write it: 950
        # levels were queued, and then could not be read back (the task page was a 500).
        ({"payload": _nested(MAX_JSON_DEPTH)}, "payload"), ({"payload": _nested(949)}, "payload"),
        ({"payload": {"a": [{"b": _nested(MAX_JSON_DEPTH - 2)}]}}, "payload"),
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


def test_a_payload_nested_as_deep_as_the_limit_is_queued_and_read_back(engine: Engine) -> None:
    deepest = {"a": [{"b": _nested(MAX_JSON_DEPTH - 4)}], "s": "[[[[" * 100}  # brackets in strings do not nest
    task = engine.tasks.enqueue("dtq.echo", deepest)
    assert engine.tasks.get(task.id)["payload"] == deepest


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


def test_a_big_batch_goes_in_calls_per_partition_and_lands_as_single_submits_do(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    # 260 submissions to one partition: three enqueueTasks calls (BULK_CHUNK 100). The depth gate
    # counts on across the calls and inside each; delayed tasks pass it; the answers keep the
    # batch's order; each record is the one a single submit writes.
    from dtq_core.engine.tasks import BULK_CHUNK

    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUE_DEPTH": 150}))
    alone = engine.tasks.enqueue("dtq.echo", {"i": -1}, queue="big", delay_seconds=60)
    subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="big", delay_seconds=60 if i % 10 == 0 else 0)
            for i in range(260)]
    before = _script_calls(redis_client)
    out = engine.tasks.enqueue_many(subs)
    assert _script_calls(redis_client) - before == -(-260 // BULK_CHUNK) == 3
    assert len(out) == 260
    queued = [i for i in range(260) if i % 10]
    for i, o in enumerate(out):
        if i % 10 == 0:
            assert getattr(o, "status", None) == "PENDING", i
        elif queued.index(i) < 150:
            assert getattr(o, "status", None) == "QUEUED", i
        else:
            assert isinstance(o, QueueFull) and o.details == {"queue": "big", "depth": 150}, i
    created = [(i, o) for i, o in enumerate(out) if not isinstance(o, QueueFull)]
    assert len(created) == 150 + 26
    assert [engine.tasks.get(o.id)["payload"]["i"] for _, o in created] == [i for i, _ in created]
    tag = tag_of(alone.id)
    assert sum(redis_client.xlen(s) for s in engine.keys.streams(tag, "big")) == 150
    single = redis_client.hgetall(engine.keys.task(alone.id))
    batched = redis_client.hgetall(engine.keys.task(created[0][1].id))
    assert single["status"] == batched["status"] == "PENDING"
    varying = ("payload", "created_at", "updated_at", "due_at")
    assert {k: v for k, v in batched.items() if k not in varying} == {
        k: v for k, v in single.items() if k not in varying}
    recent = set(redis_client.zrange(engine.keys.recent(tag), 0, -1))
    assert {o.id for _, o in created} <= recent


@pytest.mark.single_node  # INFO commandstats of one server
def test_a_batch_costs_redis_four_commands_a_task(engine: Engine, redis_client: redis.Redis) -> None:
    # docs/performance.md: a bulk task's HSET, XADD, PEXPIRE and ZADD; the owner's GET, the depth
    # gate's XLENs and the ready flag's SET once per call of 100, not once per task.
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue="cheap") for _ in range(2)])  # loads it
    subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="cheap") for i in range(100)]
    redis_client.config_resetstat()
    engine.tasks.enqueue_many(subs)
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in redis_client.info("commandstats").items()}
    for per_task in ("hset", "xadd", "pexpire", "zadd"):
        assert calls[per_task] == 100, per_task
    assert calls["fcall"] + calls.get("evalsha", 0) == 1
    assert calls["get"] == 1 and calls["xlen"] == 3 and calls.get("set", 0) <= 1
    inside = sum(n for name, n in calls.items() if name not in ("fcall", "evalsha", "config|resetstat", "info"))
    assert inside / 100 < 4.2


def test_a_batch_of_big_payloads_goes_in_calls_of_about_a_megabyte(engine: Engine, redis_client: redis.Redis) -> None:
    # Five 400 kB payloads: two a call (a third would pass BULK_CHUNK_BYTES), so three calls, not
    # one call of 2 MB; every task lands, in order.
    from dtq_core.engine.tasks import BULK_CHUNK_BYTES

    assert 2 * 400_000 <= BULK_CHUNK_BYTES < 3 * 400_000
    engine.tasks.enqueue("dtq.echo", queue="heavy")
    subs = [engine.tasks.validate("dtq.echo", {"i": i, "blob": "x" * 400_000}, queue="heavy") for i in range(5)]
    before = _script_calls(redis_client)
    out = engine.tasks.enqueue_many(subs)
    assert _script_calls(redis_client) - before == 3
    assert [engine.tasks.get(o.id)["payload"]["i"] for o in out] == list(range(5))  # type: ignore[union-attr]


def test_unknown_ids_are_not_found(engine: Engine) -> None:
    # Anything that is not a dtq task id names no task (no Redis key is even built from it), and a
    # well-formed id of no task is not found either; so is an id from before partitions.
    for bad in ("nope", "", "a:b", "x" * 300, "ab{c}-" + "0" * 32, "0" * 32, "abc123-" + "0" * 32):
        with pytest.raises(TaskNotFound):
            engine.tasks.get(bad)
        with pytest.raises(TaskNotFound):
            engine.tasks.cancel(bad, Actor.cli())


def test_every_state_change_publishes_an_event(engine: Engine, redis_client: redis.Redis) -> None:
    pubsub = redis_client.pubsub()
    pubsub.subscribe(engine.keys.events())
    announce(redis_client, engine.keys)  # a listener, as the console's feed is
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


def test_a_batch_publishes_one_event_per_task_it_created(engine: Engine, redis_client: redis.Redis) -> None:
    pubsub = redis_client.pubsub()
    pubsub.subscribe(engine.keys.events())
    announce(redis_client, engine.keys)
    pubsub.get_message(timeout=1)
    engine.tasks.enqueue("dtq.echo", queue="evb", idempotency_key="seen")
    subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="evb") for i in range(5)]
    subs.insert(2, engine.tasks.validate("dtq.echo", queue="evb", idempotency_key="seen"))  # no new task
    out = engine.tasks.enqueue_many(subs)
    events = []
    while len(events) < 6:  # the first submit's, then the batch's five
        message = pubsub.get_message(timeout=2)
        assert message is not None, "missing event"
        if message["type"] == "message":
            events.append(json.loads(message["data"]))
    assert [e["task_id"] for e in events[1:]] == [o.id for o in out if o.created]  # type: ignore[union-attr]
    assert {e["type"] for e in events} == {"task.queued"} and len({e["event_id"] for e in events}) == 6
    assert pubsub.get_message(timeout=0.3) is None  # the repeated key queued nothing, said nothing
    pubsub.close()


def test_a_batch_task_whose_command_fails_fails_alone(engine: Engine, redis_client: redis.Redis) -> None:
    # A key of the wrong type (set by hand) fails that task's command: the caller gets the error,
    # and the batch's other tasks land with their events, as when each task was a call of its own.
    tag = engine.registry.ensure("err").tags[0]
    redis_client.hset(engine.keys.partition(tag) + "idem:bad", "x", "1")
    pubsub = redis_client.pubsub()
    pubsub.subscribe(engine.keys.events())
    announce(redis_client, engine.keys)
    pubsub.get_message(timeout=1)
    subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="err", idempotency_key="bad" if i == 2 else None)
            for i in range(5)]
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        engine.tasks.enqueue_many(subs)
    landed = [engine.tasks.get(i)["payload"]["i"] for i in redis_client.zrange(engine.keys.recent(tag), 0, -1)]
    assert sorted(landed) == [0, 1, 3, 4]
    events = []
    while len(events) < 4:
        message = pubsub.get_message(timeout=2)
        assert message is not None, "missing event"
        if message["type"] == "message":
            events.append(json.loads(message["data"])["type"])
    assert events == ["task.queued"] * 4
    pubsub.close()


def test_a_cancelled_queued_task_leaves_the_depth_gate(config: DtqConfig, redis_client: redis.Redis) -> None:
    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUE_DEPTH": 2}))
    first = engine.tasks.enqueue("dtq.echo").id
    engine.tasks.enqueue("dtq.echo")
    with pytest.raises(QueueFull):
        engine.tasks.enqueue("dtq.echo")
    engine.tasks.cancel(first, Actor.cli())
    assert redis_client.xlen(engine.keys.stream(tag_of(first), "default", "normal")) == 1
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
    ids: list[str] = []
    # The submits whose (random) task id ends in 0 trim the index: one in 16. Submit until one
    # has, after at least 5 ((15/16)**400, about 6e-12, that 400 go by without one).
    while len(ids) < 5 or not ids[-1].endswith("0"):
        assert len(ids) < 400, "no task id ended in 0"
        ids.append(engine.tasks.enqueue("dtq.echo").id)
        engine.clock.advance(0.01)  # distinct scores: the index is ordered by submit time
        index = redis_client.zrange(engine.keys.recent(tag_of(ids[0])), 0, -1)
        # Between trims it keeps every submit since the last one, newest last.
        assert index == ids[-len(index):] and len(index) >= min(len(ids), 3)
    assert redis_client.zrange(engine.keys.recent(tag_of(ids[0])), 0, -1) == ids[-3:]


def _partitioned(config: DtqConfig, **settings: object) -> Engine:
    return Engine(DtqConfig.from_mapping({**config.as_settings(), **settings}))


def test_a_partitioned_queue_spreads_submits_and_gates_each_partition_at_its_share(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine = _partitioned(config, QUEUE_PARTITIONS="wide=3", MAX_QUEUE_DEPTH=5)
    tags = engine.registry.ensure("wide").tags
    assert len(tags) == 3
    ids = [engine.tasks.enqueue("dtq.echo", {"i": i}, queue="wide").id for i in range(6)]
    assert sorted(tag_of(i) for i in ids) == sorted(tags * 2)  # round robin without a key
    for tag in tags:  # a partition holds ceil(5 / 3) = 2 at most: the queue up to 6 of its 5
        assert sum(redis_client.xlen(s) for s in engine.keys.streams(tag, "wide")) == 2
    with pytest.raises(QueueFull) as full:
        engine.tasks.enqueue("dtq.echo", queue="wide")
    assert full.value.details == {"queue": "wide", "depth": 2}
    assert "limit per partition is 2" in full.value.message and "DTQ_MAX_QUEUE_DEPTH 5" in full.value.message
    assert engine.tasks.enqueue("dtq.echo", queue="wide", delay_seconds=5).status == "PENDING"


def test_an_idempotency_key_picks_one_partition_and_is_scoped_to_its_queue(config: DtqConfig) -> None:
    engine = _partitioned(config, QUEUE_PARTITIONS="wide=4")
    first = engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="wide", idempotency_key="invoice-7")
    again = [engine.tasks.enqueue("dtq.echo", {"n": 2}, queue="wide", idempotency_key="invoice-7") for _ in range(5)]
    assert {a.id for a in again} == {first.id} and not any(a.created for a in again)
    assert again[0].task is not None and again[0].task["payload"] == {"n": 1}
    elsewhere = engine.tasks.enqueue("dtq.echo", queue="other", idempotency_key="invoice-7")
    assert elsewhere.created and elsewhere.id != first.id  # keys are per queue (docs/api.md)
    batch = engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue="wide", idempotency_key=k)
                                       for k in ("invoice-7", "invoice-8", "invoice-8")])
    assert [(getattr(o, "id", None) == first.id, getattr(o, "created", None)) for o in batch] == [
        (True, False), (False, True), (False, False)]


def _delete_behind_the_cache(engine: Engine, redis_client: redis.Redis, queue: str) -> None:
    """What deleting the queue does, as seen by a submitter that cached its layout: the registry
    forgets it and each partition's owner key becomes a tombstone of that layout."""
    layout = engine.registry.get(queue)
    assert layout is not None
    redis_client.hdel(engine.keys.queues(), queue)
    for tag in layout.all_tags:
        redis_client.set(engine.keys.owner(tag), f"deleted|{layout.owner}")


def test_a_submit_holding_a_deleted_queues_layout_lands_in_the_queue_created_anew(
        engine: Engine, redis_client: redis.Redis) -> None:
    engine.tasks.enqueue("dtq.echo", queue="gone")
    old = engine.registry.get("gone")
    _delete_behind_the_cache(engine, redis_client, "gone")
    out = engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="gone")  # refused once, then registered anew
    new = engine.registry.get("gone")
    assert out.created and new is not None and old is not None and new.epoch != old.epoch
    assert redis_client.get(engine.keys.owner(tag_of(out.id))) == new.owner
    assert engine.tasks.get(out.id)["payload"] == {"n": 1}
    _delete_behind_the_cache(engine, redis_client, "gone")
    outcomes = engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", {"i": i}, queue="gone") for i in range(3)])
    assert [engine.tasks.get(o.id)["payload"] for o in outcomes] == [{"i": 0}, {"i": 1}, {"i": 2}]  # type: ignore[union-attr]


def _nodes(engine: Engine, tags: Iterable[str]) -> int:
    """How many Redis nodes hold these partitions (one, but on a cluster)."""
    client = engine.client
    if not isinstance(client, redis.cluster.RedisCluster):
        return 1
    return len({client.nodes_manager.get_node_from_slot(key_slot(engine.keys.partition(t).encode())).name
                for t in tags})


def test_a_submit_to_a_known_queue_is_one_round_trip(engine: Engine, redis_client: redis.Redis,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The layout of a queue this process knows is cached, and the enqueue script returns the record:
    # each submit (a new task, or an idempotency hit) is one script call in one write, and a batch
    # one write (per node holding its partitions, on a cluster) of one call per partition.
    import redis.connection

    sends: list[int] = []
    original = redis.connection.Connection.send_packed_command

    def counting(self: Any, command: Any, check_health: bool = True) -> None:
        sends.append(1)
        original(self, command, check_health)

    wide = _partitioned(engine.config, QUEUE_PARTITIONS="wide=3")
    for e, queue in ((engine, "known"), (wide, "wide")):
        e.tasks.enqueue("dtq.echo", queue=queue)  # registers the queue and loads the script
        # and the batch's script: the count below must not depend on an earlier test's batch
        pairs = 2 * len(e.registry.ensure(queue).tags)  # two to each partition: an enqueueTasks each
        e.tasks.enqueue_many([e.tasks.validate("dtq.echo", queue=queue) for _ in range(pairs)])
        before = _script_calls(redis_client)
        with monkeypatch.context() as patch:
            patch.setattr(redis.connection.Connection, "send_packed_command", counting)
            sends[:] = []
            for i in range(4):
                e.tasks.enqueue("dtq.echo", {"i": i}, queue=queue, idempotency_key=f"k{i % 2}")
            assert len(sends) == 4, queue
            sends[:] = []
            out = e.tasks.enqueue_many([e.tasks.validate("dtq.echo", queue=queue) for _ in range(5)])
            tags = {tag_of(o.id) for o in out}  # type: ignore[union-attr]
            assert len(sends) == _nodes(e, tags), queue
        assert len(tags) == (1 if queue == "known" else 3)
        assert _script_calls(redis_client) - before == 4 + len(tags), queue


def test_a_partition_its_registering_process_never_opened_is_opened_by_the_next_submit(
        engine: Engine, redis_client: redis.Redis) -> None:
    # A process that died between registering a queue and opening its partitions left the
    # registry naming partitions whose owner key is unset: the first submit refused there opens them.
    engine.tasks.enqueue("dtq.echo", queue="half")
    layout = engine.registry.get("half")
    assert layout is not None
    redis_client.delete(engine.keys.owner(layout.tags[0]))
    out = engine.tasks.enqueue("dtq.echo", queue="half")
    assert out.created and redis_client.get(engine.keys.owner(layout.tags[0])) == layout.owner
