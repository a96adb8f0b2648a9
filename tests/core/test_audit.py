"""The audit trail: each operator action writes its intent before it changes anything and its
outcome after, linked by an operation id; listings show one row per action."""

from __future__ import annotations

import dataclasses

import pytest
import redis

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.errors import TaskTerminal
from tests.api.support import make_dead_letters

OPERATOR = Actor.user("ops", source="console", request_id="req-7")


def raw_entries(engine: Engine) -> list[dict[str, str]]:
    return [fields for _, fields in engine.client.xrange(engine.keys.audit())]


def test_each_action_writes_intent_then_outcome_with_one_operation_id(live_engine: Engine) -> None:
    make_dead_letters(live_engine, 3)
    queued = live_engine.tasks.enqueue("dtq.echo", queue="default")
    live_engine.queues.pause("default", OPERATOR)
    live_engine.tasks.cancel(queued.id, OPERATOR)
    assert live_engine.dlq.retry(DlqSelection(queue="default"), OPERATOR) == 3
    entries = raw_entries(live_engine)
    assert [e["phase"] for e in entries] == ["start", "end"] * 3
    for intent, outcome in zip(entries[::2], entries[1::2], strict=True):
        assert intent["op_id"] == outcome["op_id"] and intent["action"] == outcome["action"]
        assert intent["actor"] == "user:ops" and intent["source"] == "console" and intent["request_id"] == "req-7"
        assert outcome["outcome"] == "finished"
    assert entries[4]["selection"] == '{"queue":"default"}' and entries[4]["selected"] == "3"
    rows = live_engine.audit.list().items  # one row per action, newest first
    assert [(r["action"], r["count"], r["outcome"]) for r in rows] == [
        ("dlq.retry", 3, "finished"), ("task.cancel", 1, "finished"), ("queue.pause", 1, "finished")]
    assert rows[0]["selection"] == {"queue": "default"} and rows[0]["selected"] == 3
    assert live_engine.audit.open_count() == 0


def test_a_bulk_action_that_fails_mid_way_is_recorded_as_failed(live_engine: Engine) -> None:
    (task_id,) = make_dead_letters(live_engine, 1)
    entry_id = live_engine.tasks.get(task_id)["dlq_entry_id"]
    # An operator whose Redis user may write the audit trail but not the DLQ (a misconfigured
    # ACL): the intent is recorded, then Redis refuses the retry itself.
    user = f"audit-only-{live_engine.keys.prefix.rpartition(':')[2]}"
    on_cluster = isinstance(live_engine.client, redis.cluster.RedisCluster)
    every_node = {"target_nodes": redis.cluster.RedisCluster.ALL_NODES} if on_cluster else {}
    live_engine.client.acl_setuser(user, enabled=True, passwords=["+pw"], commands=["+@all"],
                                   keys=[f"{live_engine.keys.audit()}*"], reset_keys=True, **every_node)
    try:
        url = live_engine.config.redis_url.replace("://", f"://{user}:pw@", 1)
        limited = Engine(dataclasses.replace(live_engine.config, redis_url=url))
        with pytest.raises(redis.exceptions.NoPermissionError):
            limited.dlq.retry(DlqSelection(ids=(entry_id,)), OPERATOR)
    finally:
        live_engine.client.acl_deluser(user, **every_node)
    (row,) = live_engine.audit.list().items
    assert (row["outcome"], row["error"], row["count"], row["selected"]) == ("failed", "NoPermissionError", 0, 1)
    assert row["selection"] == {"ids": [entry_id], "ids_total": 1}
    assert live_engine.dlq.count() == 1 and live_engine.audit.open_count() == 0


def test_an_action_started_and_never_finished_is_listed_unfinished(live_engine: Engine) -> None:
    # What a process killed between the intent and the outcome leaves behind.
    op = live_engine.audit.start(OPERATOR, "dlq.discard", "dlq:all", selected=5000, selection={"all": True})
    op.advance(4000)
    (row,) = live_engine.audit.list().items
    assert (row["outcome"], row["count"], row["selected"], row["op_id"]) == ("unfinished", 4000, 5000, op.op_id)
    assert row["progress_at"] and row["actor"] == "user:ops" and row["selection"] == {"all": True}
    assert live_engine.audit.open_count() == 1
    live_engine.audit.finish(op)
    (row,) = live_engine.audit.list().items
    assert (row["outcome"], row["count"], row["started_at"] is not None) == ("finished", 4000, True)


def test_refused_cancels_leave_no_audit_entry(live_engine: Engine) -> None:
    task = live_engine.tasks.enqueue("dtq.echo")
    live_engine.tasks.cancel(task.id, OPERATOR)
    with pytest.raises(TaskTerminal):
        live_engine.tasks.cancel(task.id, OPERATOR)
    assert len(raw_entries(live_engine)) == 2 and len(live_engine.audit.list().items) == 1


def test_an_unfinished_action_trimmed_from_the_audit_stream_is_no_longer_open(live_engine: Engine) -> None:
    engine = Engine(dataclasses.replace(live_engine.config, audit_maxlen=1), client=live_engine.client)
    engine.audit.start(OPERATOR, "dlq.retry", "dlq:all", selected=10, selection={"all": True})  # never finished
    for i in range(300):  # enough for MAXLEN ~ to drop whole nodes, the cut-short intent among them
        with engine.audit.operation(OPERATOR, "queue.pause", f"queue:q{i}"):
            pass
    assert engine.client.xlen(engine.keys.audit()) < 600
    assert engine.audit.open_count() == 0
    assert all(r["outcome"] == "finished" for r in engine.audit.list(limit=500).items)
