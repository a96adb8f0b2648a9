"""A batch (engine.tasks.enqueue_many, POST /api/v1/tasks/batch) gives each task the outcome it
would get if submitted alone, in order, found by an attack on the bulk submit (2026-12-07):

- A node that lacks a script answers "not found" and those calls are sent again after the rest of
  the exchange ran: a partition's chunks in two scripts (enqueueTasks, and an enqueueTask for a
  last chunk of one task) landed out of order on a Redis that had one and not the other, so a
  later task overtook earlier ones (idempotency, the depth gate, stream order). One script per
  partition now.
- A task placed again after its partition closed (the queue deleted and created again with
  another partition count) kept its old partition where its idempotency key now leads elsewhere,
  so the next submit with the key made a second task.
- task_queued was not sent for the tasks a batch landed when one of its tasks failed.
"""

from __future__ import annotations

import json
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
import redis
from rest_framework.test import APIClient

from dtq_core import signals
from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.tasks import BULK_CHUNK
from dtq_core.errors import QueueFull
from dtq_core.keys import tag_of
from dtq_core.scripts import LIBRARIES

from ..redis_server import RedisServer


@pytest.fixture
def api(live_engine: Engine) -> APIClient:
    """A DRF test client on the process-wide engine, pointed at this test's Redis and key prefix."""
    return APIClient()


def _without_the_batch_library(client: redis.Redis) -> None:
    """The node has no enqueueTasks library (as on a Redis that only ever saw single submits)."""
    try:
        client.function_delete(LIBRARIES["enqueueTasks"].function)
    except redis.ResponseError:
        pass  # not loaded


def test_a_batch_keeps_its_order_when_only_the_single_submit_library_is_loaded(tmp_path: Path) -> None:
    # BULK_CHUNK + 1 tasks to one partition: an enqueueTasks call (tasks 0..99, "Function not
    # found", resent) and an enqueueTask call (task 100, which runs at once). The same
    # idempotency key on task 0 and task 100: single submits in order create task 0 and answer
    # task 100 with it.
    server = RedisServer(tmp_path / "redis", appendonly=False).start()
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        engine = Engine(DtqConfig(redis_url=server.url, key_prefix="atk"),
                        clock=FakeClock(start_ms=int(time.time() * 1000)))
        engine.tasks.enqueue("dtq.echo", queue="q")  # a single submit: loads enqueueTask's library only
        n = BULK_CHUNK + 1
        subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="q",
                                      idempotency_key="dup" if i in (0, n - 1) else None) for i in range(n)]
        out: list[Any] = engine.tasks.enqueue_many(subs)
        first, last = out[0], out[-1]
        assert (first.created, last.created) == (True, False), (
            f"first created={first.created} id={first.id}; last created={last.created} id={last.id}")
        assert last.id == first.id
        assert engine.tasks.get(first.id)["payload"] == {"i": 0}
        entries = client.xrange(engine.keys.stream(tag_of(first.id), "q", "normal"))
        order = [engine.tasks.get(f["task_id"])["payload"].get("i") for _, f in entries[1:]]
        assert order == list(range(n - 1)), order[:3]
    finally:
        server.kill()


def test_the_depth_gate_of_a_batch_refuses_its_last_task_not_an_earlier_one(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    # DTQ_MAX_QUEUE_DEPTH 100, an empty queue, 101 tasks in one batch: single submits in order
    # queue tasks 0..99 and refuse task 100 (QUEUE_FULL).
    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "MAX_QUEUE_DEPTH": BULK_CHUNK}))
    engine.tasks.enqueue("dtq.echo", queue="other")  # loads enqueueTask's library
    _without_the_batch_library(redis_client)
    n = BULK_CHUNK + 1
    out = engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", {"i": i}, queue="gate") for i in range(n)])
    refused = [i for i, o in enumerate(out) if isinstance(o, QueueFull)]
    assert refused == [n - 1], f"refused items: {refused}; last item: {out[-1]!r}"


def test_the_http_batch_reports_the_first_of_two_items_with_one_idempotency_key_as_created(
        api: APIClient, redis_client: redis.Redis) -> None:
    # POST /api/v1/tasks/batch, docs/api.md: "created is false when an idempotency_key matched
    # (also a key repeated inside the same batch)": the first item is created, the repeat is not.
    single = api.post("/api/v1/tasks", json.dumps({"type": "dtq.echo", "queue": "other"}),
                      content_type="application/json")
    assert single.status_code == 201  # loads enqueueTask's library
    _without_the_batch_library(redis_client)
    n = BULK_CHUNK + 1
    items = [{"type": "dtq.echo", "payload": {"i": i}, "queue": "hb",
              **({"idempotency_key": "order-1"} if i in (0, n - 1) else {})} for i in range(n)]
    response = api.post("/api/v1/tasks/batch", json.dumps({"tasks": items}), content_type="application/json")
    assert response.status_code == 200
    results = response.json()["results"]
    assert (results[0]["created"], results[-1]["created"]) == (True, False), (results[0], results[-1])
    task = api.get(f"/api/v1/tasks/{results[0]['id']}").json()
    assert task["payload"] == {"i": 0}, task["payload"]


def test_a_retried_batch_task_stays_findable_by_its_idempotency_key(config: DtqConfig) -> None:
    stale = Engine(config)  # one partition for "inv"; it caches that layout
    other = Engine(DtqConfig.from_mapping({**config.as_settings(), "QUEUE_PARTITIONS": "inv=4"}))
    stale.registry.ensure("inv")
    old = stale.registry.get("inv")
    assert old is not None and len(old.tags) == 1
    other.queues.delete("inv", Actor.cli())  # the operator deletes it
    new = other.registry.ensure("inv")  # and it is created again, by a process with 4 partitions
    assert len(new.tags) == 4
    key = next(k for k in (f"invoice-{n}" for n in range(100)) if zlib.crc32(k.encode()) % 4 != 0)
    assert new.tag_for(key) != new.tags[0] and old.tags[0] in new.tags  # the same first tag, anew
    (first,) = stale.tasks.enqueue_many([stale.tasks.validate("dtq.echo", {"n": 1}, queue="inv",
                                                              idempotency_key=key)])
    assert first.created  # type: ignore[union-attr]
    again = other.tasks.enqueue("dtq.echo", {"n": 2}, queue="inv", idempotency_key=key)
    assert (again.created, again.id) == (False, first.id), (  # type: ignore[union-attr]
        f"a second task {again.id} (partition {tag_of(again.id)}) for key {key!r}; the first, "
        f"{first.id}, kept partition {tag_of(first.id)}")  # type: ignore[union-attr]


def test_the_tasks_a_batch_landed_are_signalled_even_when_one_of_its_tasks_failed(
        engine: Engine, redis_client: redis.Redis) -> None:
    got: list[str] = []

    def receiver(sender: Any, task_id: str, **kwargs: Any) -> None:
        got.append(task_id)

    signals.task_queued.connect(receiver)
    try:
        tag = engine.registry.ensure("err").tags[0]
        redis_client.hset(engine.keys.partition(tag) + "idem:bad", "x", "1")  # a key of the wrong type
        single = engine.tasks.enqueue("dtq.echo", queue="err")
        assert got == [single.id]  # a single submit is signalled
        subs = [engine.tasks.validate("dtq.echo", {"i": i}, queue="err", idempotency_key="bad" if i == 2 else None)
                for i in range(5)]
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            engine.tasks.enqueue_many(subs)
        landed = [t for t in redis_client.zrange(engine.keys.recent(tag_of(single.id)), 0, -1) if t != single.id]
        assert len(landed) == 4  # tasks 0, 1, 3 and 4 are queued
        assert sorted(got[1:]) == sorted(landed), f"task_queued sent for {got[1:]}, queued: {landed}"
    finally:
        signals.task_queued.disconnect(receiver)
