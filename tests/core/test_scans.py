"""Filtered walks run in Redis (scanDeadLetters, scanRecentTasks): every page, followed by its
cursor, gives exactly what a plain Python filter over the whole DLQ or task index gives, in order,
with no duplicates, including where a page ends on the scan budget or inside one millisecond.
The DLQ is read over several partitions (queue qa has three) and merged newest first."""

from __future__ import annotations

import dataclasses
import functools
import itertools
from typing import Any

import pytest
import redis
import redis.cluster
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtq_core.engine import Engine, reads
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq_selection import DlqSelection
from dtq_core.engine.dlq_walk import group_key
from dtq_core.keys import dlq_ref

from ..api.support import drain
from ..dead_letters import plant_dead_letters

# Error texts and payload notes with the characters where Python's lower() and Lua's differ:
# U+0130 and U+212A (the Kelvin sign) lower-case to ASCII in Python; É, Ä and ß do not in Lua.
TEXTS = ["Card DECLINED by issuer", "SMTP refused: 550", "\u0130stanbul gateway down", "5 \u212aelvin overheat",
         "échec: ÉCHEC total", "Timeout after 30s", "naïve Straße", "ÄRGER mit \"quotes\" and \\slashes"]
ALPHABET = "aAiIkK\u212a\u0130\u0307éÉßsS: \"\\0"


@pytest.fixture
def dlq_engine(engine: Engine) -> Engine:
    """The engine with queue qa in three partitions, so DLQ reads merge partitions."""
    config = dataclasses.replace(engine.config, queue_partitions=(("qa", 3),))
    return Engine(config, client=engine.client, clock=engine.clock)


def _planted(engine: Engine) -> None:
    """The dead letters _dead_letters makes, written straight into their partitions."""
    for i, (error, note) in enumerate(itertools.product(TEXTS, TEXTS[::3])):
        plant_dead_letters(engine, 1, queue="qa" if i % 2 else "qb", type="no.such.type" if i % 5 == 0 else "dtq.fail",
                           message=error, payload={"message": error, "note": note})


def _dead_letters(engine: Engine) -> None:
    subs = []
    for i, (error, note) in enumerate(itertools.product(TEXTS, TEXTS[::3])):
        ttype = "no.such.type" if i % 5 == 0 else "dtq.fail"
        subs.append(engine.tasks.validate(ttype, {"message": error, "note": note}, queue="qa" if i % 2 else "qb",
                                          max_attempts=1))
    engine.tasks.enqueue_many(subs)
    drain(engine.config)


def _all_pages(fetch: Any, limit: int) -> list[str]:
    ids: list[str] = []
    cursor = None
    for _ in range(1000):
        page = fetch(cursor=cursor, limit=limit)
        ids.extend(page.items)
        cursor = page.next_cursor
        if cursor is None:
            return ids
    raise AssertionError("the cursor never ran out")


def _dlq_entries(engine: Engine, client: redis.Redis) -> list[tuple[str, dict[str, str]]]:
    """Every partition's dead letters as (id, fields), in the merged order: newest first by entry
    id time, then partition tag, then sequence number."""
    rows = []
    for layout in engine.registry.layouts(fresh=True).values():
        for tag in layout.all_tags:
            for eid, f in client.xrevrange(engine.keys.dlq(tag)):
                ms, seq = map(int, eid.split("-"))
                rows.append(((ms, tag, seq), dlq_ref(tag, eid), f))
    return [(ref, f) for _, ref, f in sorted(rows, key=lambda row: row[0], reverse=True)]


def _dlq_reference(engine: Engine, client: redis.Redis, *, queue: str | None, type: str | None,
                   q: str | None) -> list[str]:
    out = []
    for ref, f in _dlq_entries(engine, client):
        payload = client.hget(engine.keys.task(f["task_id"]), "payload") or ""
        if (queue and f["queue"] != queue) or (type and f["type"] != type):
            continue
        needle = (q or "").lower()
        if needle and needle not in (f["error"] + " " + f["error_class"]).lower() and needle not in payload.lower():
            continue
        out.append(ref)
    return out


def _dlq_pages(engine: Engine, **filters: Any) -> list[str]:
    pages = _all_pages(functools.partial(engine.dlq.list, **filters), limit=3)
    return [item["entry_id"] for item in pages]  # type: ignore[index]


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reads, "SCAN_BUDGET", 7)  # pages end on the budget, not only on the limit
    monkeypatch.setattr(reads, "SCAN_CALL_BYTES", 300)  # and script calls on their byte budget


def _script_calls(client: redis.Redis) -> int:
    """Script calls run so far (EVALSHA, and FCALL for the hot-path scripts: scripts/library.py),
    on every master of a cluster. Less the failed ones: the first use of a script on a fresh server
    is refused (NOSCRIPT, "Function not found"), loaded and sent again."""
    if isinstance(client, redis.cluster.RedisCluster):
        per_node = list(client.info("commandstats", target_nodes=redis.cluster.RedisCluster.PRIMARIES).values())
    else:
        per_node = [client.info("commandstats")]
    stats = [info.get(f"cmdstat_{command}", {}) for info in per_node for command in ("evalsha", "fcall")]
    return sum(int(s.get("calls", 0)) - int(s.get("failed_calls", 0)) for s in stats)


def test_dlq_search_matches_pythons_lower_for_any_needle(dlq_engine: Engine, redis_client: redis.Redis,
                                                         small_budget: None) -> None:
    _planted(dlq_engine)
    assert dlq_engine.dlq.count() == len(TEXTS) * 3
    totals = {None: len(TEXTS) * 3, "qa": len(TEXTS) * 3 // 2, "qb": len(TEXTS) * 3 // 2}
    substrings = st.sampled_from(TEXTS).flatmap(
        lambda t: st.tuples(st.integers(0, len(t) - 1), st.integers(1, 6)).map(lambda ab: t[ab[0]:ab[0] + ab[1]]))
    cased = substrings.flatmap(lambda s: st.sampled_from([s, s.upper(), s.lower(), s.swapcase()]))
    needles = st.one_of(cased, st.text(alphabet=ALPHABET, min_size=1, max_size=3)).filter(bool)

    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(needle=needles, queue=st.sampled_from([None, "qa", "qb"]), type=st.sampled_from([None, "dtq.fail"]),
           budget=st.sampled_from([5, 12, 24, 30]))
    def check(needle: str, queue: str | None, type: str | None, budget: int) -> None:
        expected = _dlq_reference(dlq_engine, redis_client, queue=queue, type=type, q=needle)
        assert _dlq_pages(dlq_engine, queue=queue, type=type, q=needle) == expected
        # The bulk-action preview counts the same matches within the newest `budget` entries
        # (shared among the partitions read), and says whether that was all of them.
        preview = dlq_engine.dlq.match_count(queue=queue, type=type, q=needle, budget=budget)
        assert preview["exact"] == (budget >= totals[queue])
        if preview["exact"]:
            assert preview["count"] == len(expected)
        elif queue == "qb":  # one partition: exactly its newest `budget` entries
            newest = {ref for ref, f in _dlq_entries(dlq_engine, redis_client) if f["queue"] == "qb"}
            newest = set(sorted(newest, key=lambda ref: tuple(map(int, ref.split("-")[1:])))[-budget:])
            assert preview["count"] == len(newest.intersection(expected))
        else:
            assert preview["count"] <= len(expected)

    check()


@pytest.mark.parametrize(("needle", "finds"), [
    ("declined", True), ("KELVIN", True), ("istanbul", False), ("i\u0307stanbul", True), ("échec", True),
    ("STRASSE", False), ("straße", True), ("\\\\slashes", True), ("cus_nothing", False)])
def test_dlq_search_finds_what_an_operator_types(dlq_engine: Engine, redis_client: redis.Redis, needle: str,
                                                 finds: bool) -> None:
    # "KELVIN" finds the Kelvin sign and "İstanbul" lower-cases to "i̇stanbul", as in Python; a
    # JSON payload holds a backslash doubled.
    _planted(dlq_engine)
    found = _dlq_pages(dlq_engine, q=needle)
    assert found == _dlq_reference(dlq_engine, redis_client, queue=None, type=None, q=needle)
    assert bool(found) is finds


def test_dlq_filters_page_across_the_scan_budget(dlq_engine: Engine, redis_client: redis.Redis,
                                                 small_budget: None) -> None:
    _planted(dlq_engine)
    for queue, type in itertools.product([None, "qa", "qb", "nope"], [None, "dtq.fail", "no.such.type"]):
        expected = _dlq_reference(dlq_engine, redis_client, queue=queue, type=type, q=None)
        assert _dlq_pages(dlq_engine, queue=queue, type=type) == expected, (queue, type)


# Messages one error group must tell apart: a message inside another ("boom" in "kaboom"), one
# only the first line of a traceback, padded, cut at 200 characters, and none at all.
GROUP_ERRORS = ["boom", "kaboom", "boom\nTraceback (most recent call last)", "  boom  ", "boom!", "", "   ",
                "x" * 250, "x" * 200 + "y", "\u0130stanbul boom"]


def test_a_group_filter_selects_exactly_that_groups_dead_letters(dlq_engine: Engine, redis_client: redis.Redis,
                                                                 small_budget: None) -> None:
    for i, (error, error_class) in enumerate(itertools.product(GROUP_ERRORS, ["app.Boom", "app.Other", ""])):
        plant_dead_letters(dlq_engine, 1, queue="qa" if i % 2 else "qb", type="dtq.fail" if i % 4 else "no.such.type",
                           message=error, payload={"note": "boom"}, error_class=error_class)
    entries = _dlq_entries(dlq_engine, redis_client)
    keys = {group_key(f) for _, f in entries}
    assert ("dtq.fail", "app.Boom", "boom") in keys and ("dtq.fail", "", "") in keys
    for (type, error_class, message), queue in itertools.product(
            [*keys, ("dtq.fail", "app.Boom", "boo"), ("dtq.fail", "app.Boom", "x" * 250)], [None, "qa"]):
        expected = [ref for ref, f in entries if group_key(f) == (type, error_class, message)
                    and queue in (None, f["queue"])]
        group = {"queue": queue, "type": type, "error_class": error_class, "message": message}
        assert _dlq_pages(dlq_engine, **group) == expected, group
        assert dlq_engine.dlq.match_count(**group, budget=1000) == {"count": len(expected), "exact": True}
        assert dlq_engine.dlq.select(DlqSelection(**group)) == expected
    # Without a type, the error class and message select that group of every type.
    assert len(_dlq_pages(dlq_engine, error_class="app.Boom", message="boom")) == sum(
        1 for _, f in entries if group_key(f)[1:] == ("app.Boom", "boom"))


def _recent_ids(engine: Engine, client: redis.Redis) -> list[str]:
    """Every partition's recent-tasks index together, in the listing's order: newest first, then
    by id, descending."""
    rows: list[tuple[str, float]] = []
    for layout in engine.registry.layouts(fresh=True).values():
        for tag in layout.all_tags:
            rows += client.zrange(engine.keys.recent(tag), 0, -1, withscores=True)
    return [task_id for task_id, _ in sorted(rows, key=lambda row: (row[1], row[0]), reverse=True)]


def _tasks_reference(engine: Engine, client: redis.Redis, **filters: str | None) -> list[str]:
    out = []
    for task_id in _recent_ids(engine, client):
        record = client.hgetall(engine.keys.task(task_id))
        if record and all(not v or record.get(k) == v for k, v in filters.items()):
            out.append(task_id)
    return out


@pytest.fixture(params=[1, 3], ids=["one-partition", "qa-in-3-partitions"])
def partitioned_engine(request: pytest.FixtureRequest, engine: Engine) -> Engine:
    """The engine, or one whose queue qa has three partitions (the listing merges them)."""
    if request.param == 1:
        return engine
    config = dataclasses.replace(engine.config, queue_partitions=(("qa", request.param),))
    return Engine(config, client=engine.client, clock=engine.clock)


@pytest.mark.parametrize("limit", [1, 3, 50])
def test_task_filters_page_across_the_budget_and_within_one_millisecond(
        partitioned_engine: Engine, redis_client: redis.Redis, small_budget: None, limit: int) -> None:
    engine = partitioned_engine
    ids = []
    for i in range(30):  # the engine's clock stands still: runs of tasks share a millisecond
        if i % 8 == 0:
            engine.clock.advance(0.001)  # type: ignore[attr-defined]
        ids.append(engine.tasks.enqueue("t.x" if i % 3 else "t.y", {"i": i}, queue="qa" if i % 2 else "qb").id)
    for task_id in ids[::4]:
        engine.tasks.cancel(task_id, Actor.cli())
    for task_id in ids[1::7]:
        redis_client.delete(engine.keys.task(task_id))  # expired: the index entry outlives the hash
    combos = itertools.product([None, "qa"], [None, "QUEUED", "CANCELLED", "RUNNING"], [None, "t.y"])
    for queue, status, ttype in combos:
        expected = _tasks_reference(engine, redis_client, queue=queue, status=status, type=ttype)
        pages = _all_pages(functools.partial(engine.tasks.list, queue=queue, status=status, type=ttype),
                           limit=limit)
        assert [t["id"] for t in pages] == expected, (queue, status, ttype)  # type: ignore[index]
    assert len(_tasks_reference(engine, redis_client)) == 30 - len(ids[1::7])


def _page_sizes(fetch: Any, limit: int) -> list[int]:
    sizes, cursor = [], None
    for _ in range(1000):
        page = fetch(cursor=cursor, limit=limit)
        sizes.append(len(page.items))
        cursor = page.next_cursor
        if cursor is None:
            return sizes
    raise AssertionError("the cursor never ran out")


def _full_pages_then_the_rest(total: int, limit: int) -> list[int]:
    """Page sizes when no page ends on the scan budget: no cursor leads to an empty page."""
    return [limit] * (total // limit) + ([total % limit] if total % limit or not total else [])


@pytest.mark.parametrize("limit", [1, 3, 4, 24])
def test_a_cursor_is_offered_only_when_an_older_match_exists(engine: Engine, redis_client: redis.Redis,
                                                             limit: int) -> None:
    # 24 dead letters (12 per queue): limits that divide the matches exactly end a full page on
    # the oldest match, where a cursor used to lead to an empty page.
    _dead_letters(engine)
    for queue, type, q in itertools.product([None, "qa", "nope"], [None, "dtq.fail"], [None, "declined", "échec"]):
        total = len(_dlq_reference(engine, redis_client, queue=queue, type=type, q=q))
        sizes = _page_sizes(functools.partial(engine.dlq.list, queue=queue, type=type, q=q), limit)
        assert sizes == _full_pages_then_the_rest(total, limit), (queue, type, q)
    for queue, status, ttype in itertools.product([None, "qa"], [None, "DEAD_LETTERED"], [None, "dtq.fail"]):
        total = len(_tasks_reference(engine, redis_client, queue=queue, status=status, type=ttype))
        sizes = _page_sizes(functools.partial(engine.tasks.list, queue=queue, status=status, type=ttype), limit)
        assert sizes == _full_pages_then_the_rest(total, limit), (queue, status, ttype)


def test_a_non_ascii_search_reads_the_dlq_in_few_calls(dlq_engine: Engine, redis_client: redis.Redis) -> None:
    # Matched in Python, the needle must not make the script stop at `limit` candidates each call.
    _planted(dlq_engine)
    before = _script_calls(redis_client)
    page = dlq_engine.dlq.list(q="ünmatched", limit=1)
    assert page.items == [] and page.next_cursor is None
    assert _script_calls(redis_client) - before == 4  # 24 entries in four partitions: one call each


def test_large_payloads_split_a_search_into_calls_of_about_a_megabyte(dlq_engine: Engine,
                                                                      redis_client: redis.Redis) -> None:
    big = "x" * 400_000
    ids = [plant_dead_letters(dlq_engine, 1, payload={"message": "boom", "blob": big + str(i)})[0] for i in range(6)]
    before = _script_calls(redis_client)
    assert [i["task_id"] for i in dlq_engine.dlq.list(q="xxx5").items] == [ids[5]]
    assert [i["task_id"] for i in dlq_engine.dlq.list(q="nowhere").items] == []
    # Each call stops once it has looked at 1 MB: three 400 KB payloads, so two calls per search.
    assert _script_calls(redis_client) - before == 2 + 2
    before = _script_calls(redis_client)
    assert len(dlq_engine.tasks.list(type="dtq.fail").items) == 6  # records carry their payloads
    assert _script_calls(redis_client) - before == 2


def test_task_pages_hold_while_newer_tasks_arrive(partitioned_engine: Engine, redis_client: redis.Redis) -> None:
    # A cursor is a position in the listing, not an offset: tasks submitted between two pages, in
    # any partition, show above it and move nothing below it.
    engine = partitioned_engine
    older = []
    for i in range(12):
        if i % 5 == 0:
            engine.clock.advance(0.001)  # type: ignore[attr-defined]
        older.append(engine.tasks.enqueue("dtq.echo", {"i": i}, queue="qa" if i % 3 else "qb").id)
    expected = _tasks_reference(engine, redis_client)
    first = engine.tasks.list(limit=4)
    assert [t["id"] for t in first.items] == expected[:4]
    for i in range(6):  # in the same millisecond as the newest page, and later
        engine.tasks.enqueue("dtq.echo", {"new": i}, queue="qa" if i % 2 else "qb")
        engine.clock.advance(0.0005)  # type: ignore[attr-defined]
    rest, cursor = [], first.next_cursor
    while cursor:
        page = engine.tasks.list(cursor=cursor, limit=3)
        rest += [t["id"] for t in page.items]
        cursor = page.next_cursor
    assert rest == expected[4:]


def test_a_task_listing_reads_one_queues_partitions_only(engine: Engine, redis_client: redis.Redis) -> None:
    wide = Engine(dataclasses.replace(engine.config, queue_partitions=(("qa", 4),)), client=engine.client,
                  clock=engine.clock)
    for i in range(8):
        wide.tasks.enqueue("dtq.echo", {"i": i}, queue="qa" if i % 2 else "qb")
    before = _script_calls(redis_client)
    assert len(wide.tasks.list(queue="qa").items) == 4
    assert _script_calls(redis_client) - before == 4  # one round: a call per partition of qa
    assert wide.tasks.list(queue="unknown").items == []


@pytest.mark.parametrize("limit", [1, 3, 4, 12])
def test_a_task_cursor_is_offered_only_when_an_older_match_exists(partitioned_engine: Engine,
                                                                  redis_client: redis.Redis, limit: int) -> None:
    engine = partitioned_engine
    for i in range(24):  # 12 per queue: limits that divide the matches end a full page on the oldest
        engine.tasks.enqueue("dtq.echo" if i % 4 else "dtq.fail", {"i": i}, queue="qa" if i % 2 else "qb")
    for queue, type in itertools.product([None, "qa", "nope"], [None, "dtq.fail"]):
        total = len(_tasks_reference(engine, redis_client, queue=queue, type=type))
        sizes = _page_sizes(functools.partial(engine.tasks.list, queue=queue, type=type), limit)
        assert sizes == _full_pages_then_the_rest(total, limit), (queue, type)
