"""Transaction safety: a task enqueued inside a transaction reaches Redis only if it commits."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.db import transaction

from dtq_core.django_tasks import DtqBackend, enqueue_on_commit
from dtq_core.django_tasks.compat import SOURCE, InvalidTask, TaskResultDoesNotExist, TaskResultStatus, task_enqueued
from dtq_core.engine import Engine
from dtq_core.keys import tag_of

from . import tasks_module as tm
from .conftest import BACKEND, task_keys

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def test_rollback_leaves_nothing_in_redis(backend: DtqBackend, live_engine: Engine,
                                          redis_client: redis.Redis) -> None:
    with pytest.raises(Rollback), transaction.atomic():
        result = enqueue_on_commit(tm.add, 1, 2)
        assert result.status == TaskResultStatus.READY and result.enqueued_at is None
        assert task_keys(redis_client, live_engine) == []  # not before the commit either
        raise Rollback
    assert task_keys(redis_client, live_engine) == []
    assert not list(redis_client.scan_iter(match=live_engine.keys.schedule("*")))
    with pytest.raises(TaskResultDoesNotExist):
        tm.add.get_result(result.id)


def test_commit_leaves_exactly_one_task(backend: DtqBackend, live_engine: Engine,
                                        redis_client: redis.Redis) -> None:
    sent: list[str] = []

    def receiver(sender: Any, task_result: Any, **kwargs: Any) -> None:
        sent.append(task_result.id)

    task_enqueued.connect(receiver)
    try:
        with transaction.atomic():
            result = enqueue_on_commit(tm.add, 1, b=2)
            assert sent == []
    finally:
        task_enqueued.disconnect(receiver)
    assert task_keys(redis_client, live_engine) == [live_engine.keys.task(result.id)]
    assert sent == [result.id] and result.enqueued_at is not None
    assert tm.add.get_result(result.id).status == TaskResultStatus.READY


def test_a_nested_savepoint_rollback_drops_only_its_task(backend: DtqBackend, live_engine: Engine,
                                                         redis_client: redis.Redis) -> None:
    with transaction.atomic():
        kept = enqueue_on_commit(tm.add, 1, 1)
        with pytest.raises(Rollback), transaction.atomic():
            enqueue_on_commit(tm.add, 2, 2)
            raise Rollback
    assert task_keys(redis_client, live_engine) == [live_engine.keys.task(kept.id)]


def test_outside_a_transaction_it_enqueues_at_once(backend: DtqBackend, live_engine: Engine) -> None:
    result = enqueue_on_commit(tm.add, 1, 1)
    assert live_engine.tasks.get(result.id)["status"] == "QUEUED"


def test_the_enqueue_on_commit_option_defers_every_enqueue(tasks_settings: Any, live_engine: Engine,
                                                           redis_client: redis.Redis) -> None:
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND, "OPTIONS": {"ENQUEUE_ON_COMMIT": True}}}
    with pytest.raises(Rollback), transaction.atomic():
        tm.add.enqueue(1, 1)
        raise Rollback
    assert task_keys(redis_client, live_engine) == []
    with transaction.atomic():
        result = tm.aadd.enqueue(1, 1)
    assert task_keys(redis_client, live_engine) == [live_engine.keys.task(result.id)]


def test_the_helper_refuses_a_backend_that_is_not_dtq(tasks_settings: Any) -> None:
    tasks_settings.TASKS = {"default": {"BACKEND": BACKEND},
                            "immediate": {"BACKEND": f"{SOURCE}.backends.immediate.ImmediateBackend"}}
    with pytest.raises(InvalidTask, match="DtqBackend"):
        enqueue_on_commit(tm.add.using(backend="immediate"), 1, 1)


def test_the_id_handed_out_before_the_commit_is_the_tasks_id(backend: DtqBackend, live_engine: Engine,
                                                             redis_client: redis.Redis) -> None:
    # The id names the task's partition, chosen at enqueue; the queue deleted before the commit
    # (its partitions closed under this process's cached layout) is created anew at the commit.
    with transaction.atomic():
        result = enqueue_on_commit(tm.add, 1, 1)
        handed_out = result.id
        layout = live_engine.registry.get("default")
        assert layout is not None and tag_of(handed_out) in layout.tags
        redis_client.hdel(live_engine.keys.queues(), "default")
        for tag in layout.all_tags:
            redis_client.set(live_engine.keys.owner(tag), f"deleted|{layout.owner}")
    assert result.id == handed_out and result.enqueued_at is not None
    assert task_keys(redis_client, live_engine) == [live_engine.keys.task(handed_out)]
    assert tm.add.get_result(handed_out).status == TaskResultStatus.READY
