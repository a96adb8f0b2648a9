"""run_after is an absolute time: enqueue_on_commit counts the delay to it when the commit pushes
the task, not when the task is built inside the transaction."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from django.db import transaction

from dtq_core.django_tasks import DtqBackend, enqueue_on_commit
from dtq_core.engine import Engine
from dtq_core.keys import tag_of

from ..conftest import wait_for
from . import tasks_module as tm

pytestmark = pytest.mark.django_db(transaction=True)


def test_enqueue_on_commit_keeps_run_after_as_an_absolute_time(backend: DtqBackend,
                                                               live_engine: Engine,
                                                               redis_client: redis.Redis) -> None:
    when = datetime.now(tz=UTC) + timedelta(seconds=3)
    with transaction.atomic():
        result = enqueue_on_commit(tm.add.using(run_after=when), 1, 2)
        # The request keeps its transaction open a few seconds (slow view, row locks, ...).
        wait_for(lambda: time.time() > when.timestamp() + 2, timeout=10)
    # docs/django-tasks.md: run_after -> delay "until then"; a time in the past runs at once.
    # The commit happened after run_after: the task must be QUEUED now, not due 3 s after the commit.
    stored = live_engine.tasks.get(result.id)
    due = redis_client.zscore(live_engine.keys.schedule(tag_of(result.id)), result.id)
    assert stored["status"] != "PENDING" and due is None, (
        f"status {stored['status']}, due {due and (due / 1000 - when.timestamp()):.1f}s after run_after")
