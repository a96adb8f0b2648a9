"""Pages of the schedule and the audit log, followed by their cursors, show every entry once, in
order, and offer no cursor to an empty page."""

from __future__ import annotations

import functools
from typing import Any

import redis

from dtq_core.admin import Actor
from dtq_core.engine import Engine

from .test_scans import _all_pages, _full_pages_then_the_rest, _page_sizes


def test_schedule_pages_through_tasks_due_in_the_same_millisecond(engine: Engine, redis_client: redis.Redis) -> None:
    # The engine's clock stands still: a run of delayed submits shares one due time, as tasks
    # scheduled for the same moment do. A cursor used to skip the rest of that millisecond.
    ids = [engine.enqueue("dtq.echo", {"i": i}, delay_seconds=60 + 30 * (i // 7)).id for i in range(17)]
    expected = [m for m, _ in redis_client.zrange(engine.keys.schedule(), 0, -1, withscores=True)]
    assert sorted(expected) == sorted(ids)
    for limit in (1, 3, 5, 7, 16, 17, 50):
        pages = _all_pages(functools.partial(engine.schedule_list), limit=limit)
        assert [i["task_id"] for i in pages] == expected, limit  # type: ignore[index]
        assert _page_sizes(engine.schedule_list, limit) == _full_pages_then_the_rest(17, limit), limit


def test_an_old_schedule_cursor_still_reads(engine: Engine) -> None:
    first = engine.enqueue("dtq.echo", delay_seconds=30).id
    engine.clock.advance(1)  # type: ignore[attr-defined]
    second = engine.enqueue("dtq.echo", delay_seconds=30).id
    due_first = engine.schedule_list(limit=1).items[0]
    assert due_first["task_id"] == first
    score = str(engine.client.zscore(engine.keys.schedule(), first)).split(".")[0]
    # "<due ms>" alone, as links made before the offset was added: from that due time on.
    assert [i["task_id"] for i in engine.schedule_list(cursor=score).items] == [first, second]


def test_audit_pages_offer_no_cursor_to_an_empty_page(engine: Engine) -> None:
    actors = [Actor.user("ann", source="console"), Actor(name="cli:root", source="cli")]
    for i in range(12):
        engine.audit(actors[i % 2], "queue.pause" if i % 3 else "dlq.retry", f"queue:q{i}", 1)
    filters: list[dict[str, Any]] = [{}, {"source": "cli"}, {"action": "dlq.retry"}, {"actor": "user:nobody"}]
    for where in filters:
        total = len(engine.audit_list(limit=500, **where).items)
        for limit in (1, 2, 4, 6, 12):
            fetch = functools.partial(engine.audit_list, **where)
            assert _page_sizes(fetch, limit) == _full_pages_then_the_rest(total, limit), (where, limit)
            assert [e["id"] for e in _all_pages(fetch, limit)] == [  # type: ignore[index]
                e["id"] for e in engine.audit_list(limit=500, **where).items]
