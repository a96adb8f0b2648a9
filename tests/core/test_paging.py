"""Pages of the schedule (merged over every queue partition) and the audit log, followed by their
cursors, show every entry once, in order, and offer no cursor to an empty page."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import redis

from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.errors import ValidationError
from dtq_core.keys import tag_of

from .test_scans import _all_pages, _full_pages_then_the_rest, _page_sizes


def _schedule_order(engine: Engine, client: redis.Redis) -> list[str]:
    """Every partition's schedule, in the order a page shows it: due time, then task id."""
    scored = [(score, member) for layout in engine.registry.layouts(fresh=True).values() for tag in layout.all_tags
              for member, score in client.zrange(engine.keys.schedule(tag), 0, -1, withscores=True)]
    return [member for _, member in sorted(scored)]


@pytest.mark.parametrize("partitions", [1, 3])
def test_schedule_pages_through_tasks_due_in_the_same_millisecond(config: DtqConfig, redis_client: redis.Redis,
                                                                   partitions: int) -> None:
    # The engine's clock stands still: a run of delayed submits shares one due time, as tasks
    # scheduled for the same moment do. A cursor used to skip the rest of that millisecond; with
    # partitions, the rest of it in every other partition.
    engine = Engine(DtqConfig.from_mapping({**config.as_settings(), "QUEUE_PARTITIONS": f"default={partitions}"}),
                    clock=FakeClock(start_ms=1_800_000_000_000))
    ids = [engine.tasks.enqueue("dtq.echo", {"i": i}, delay_seconds=60 + 30 * (i // 7)).id for i in range(17)]
    ids += [engine.tasks.enqueue("dtq.echo", {"i": i}, queue="other", delay_seconds=60).id for i in range(3)]
    assert len({tag_of(i) for i in ids}) == partitions + 1
    expected = _schedule_order(engine, redis_client)
    assert sorted(expected) == sorted(ids)
    for limit in (1, 3, 5, 7, 16, 17, 20, 50):
        pages = _all_pages(functools.partial(engine.schedule.list), limit=limit)
        assert [i["task_id"] for i in pages] == expected, limit  # type: ignore[index]
        assert _page_sizes(engine.schedule.list, limit) == _full_pages_then_the_rest(20, limit), limit
    assert engine.schedule.count() == 20


def test_an_old_schedule_cursor_still_reads_after_its_millisecond(engine: Engine) -> None:
    first = engine.tasks.enqueue("dtq.echo", delay_seconds=30).id
    engine.clock.advance(1)  # type: ignore[attr-defined]
    second = engine.tasks.enqueue("dtq.echo", delay_seconds=30).id
    assert engine.schedule.list(limit=1).items[0]["task_id"] == first
    score = str(int(engine.client.zscore(engine.keys.schedule(tag_of(first)), first)))
    # "<due ms>" alone, as links made before the task id was added: after that millisecond.
    assert [i["task_id"] for i in engine.schedule.list(cursor=score).items] == [second]


def test_schedule_pages_hold_while_due_tasks_leave_the_front(engine: Engine, redis_client: redis.Redis) -> None:
    # The scheduler removes tasks from the front as they come due, between an operator's pages;
    # even when the last task shown is one of them, the next page starts where it left off.
    batch = [engine.tasks.enqueue("dtq.echo", {"i": i}, delay_seconds=5).id for i in range(6)]
    later = []
    for i in range(4):
        engine.clock.advance(1)  # type: ignore[attr-defined]
        later.append(engine.tasks.enqueue("dtq.echo", {"i": i}, delay_seconds=5).id)
    order = _schedule_order(engine, redis_client)
    schedule = engine.keys.schedule(tag_of(order[0]))  # one partition: the default queue's
    first = engine.schedule.list(limit=2)
    assert [i["task_id"] for i in first.items] == order[:2]
    redis_client.zrem(schedule, order[0])  # one of the page's tasks came due
    second = engine.schedule.list(cursor=first.next_cursor, limit=2)
    assert [i["task_id"] for i in second.items] == order[2:4]
    redis_client.zrem(schedule, *batch)  # the whole due millisecond, last shown included
    rest = _all_pages(functools.partial(engine.schedule.list), limit=2)
    assert [i["task_id"] for i in rest] == later  # type: ignore[index]
    third = engine.schedule.list(cursor=second.next_cursor, limit=10)
    assert [i["task_id"] for i in third.items] == later and third.next_cursor is None


def test_a_malformed_schedule_cursor_is_refused(engine: Engine) -> None:
    for cursor in ("x1", "12-a b", "12-" + "a" * 129, "-abc", "12-abc", "12-" + "0" * 32):
        with pytest.raises(ValidationError):
            engine.schedule.list(cursor=cursor)


def test_audit_pages_offer_no_cursor_to_an_empty_page(engine: Engine) -> None:
    actors = [Actor.user("ann", source="console"), Actor(name="cli:root", source="cli")]
    for i in range(12):
        engine.audit.record(actors[i % 2], "queue.pause" if i % 3 else "dlq.retry", f"queue:q{i}", 1)
    filters: list[dict[str, Any]] = [{}, {"source": "cli"}, {"action": "dlq.retry"}, {"actor": "user:nobody"}]
    for where in filters:
        total = len(engine.audit.list(limit=500, **where).items)
        for limit in (1, 2, 4, 6, 12):
            fetch = functools.partial(engine.audit.list, **where)
            assert _page_sizes(fetch, limit) == _full_pages_then_the_rest(total, limit), (where, limit)
            assert [e["id"] for e in _all_pages(fetch, limit)] == [  # type: ignore[index]
                e["id"] for e in engine.audit.list(limit=500, **where).items]
