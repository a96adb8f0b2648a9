"""The DLQ over many partitions: one list, merged newest first (entry id time, then partition tag,
then sequence number), whose cursor stays put while dead letters arrive; counts and groups over
every partition; actions by id, task id or filter that reach each entry in its own partition; and a
retry into a queue no longer registered, which registers the queue again."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dtq_core.engine import Engine, reads
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.errors import QueueNotEmpty
from dtq_core.keys import dlq_ref

from ..dead_letters import plant_dead_letters

OPERATOR = Actor.cli()


@pytest.fixture
def dlq_engine(engine: Engine) -> Engine:
    config = dataclasses.replace(engine.config, queue_partitions=(("qa", 3), ("qc", 2)))
    return Engine(config, client=engine.client, clock=engine.clock)


def _add(engine: Engine, tag: str, entry_id: str, *, queue: str = "qa", type: str = "t.a") -> str:
    """A dead letter at a chosen entry id (to make entries of one millisecond in several partitions)."""
    engine.client.xadd(engine.keys.dlq(tag), {"task_id": f"{tag}-{'0' * 32}", "queue": queue, "type": type,
                                               "attempt": 1, "error_class": "E", "error": "x", "failed_at": 1},
                       id=entry_id)
    return dlq_ref(tag, entry_id)


def _merged(refs: list[str]) -> list[str]:
    def key(ref: str) -> tuple[int, str, int]:
        tag, ms, seq = ref.split("-")
        return int(ms), tag, int(seq)

    return sorted(refs, key=key, reverse=True)


def _pages(engine: Engine, limit: int, **filters: str) -> list[str]:
    seen: list[str] = []
    cursor = None
    for _ in range(1000):
        page = engine.dlq.list(cursor=cursor, limit=limit, **filters)
        seen.extend(item["entry_id"] for item in page.items)
        cursor = page.next_cursor
        if cursor is None:
            return seen
    raise AssertionError("the cursor never ran out")


def test_the_list_merges_partitions_by_time_then_tag_across_pages_and_budgets(
        dlq_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    tags = list(dlq_engine.registry.ensure("qa").tags)
    assert len(tags) == 3

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                     HealthCheck.too_slow])
    @given(spread=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 6), st.booleans()), min_size=0, max_size=30),
           limit=st.integers(1, 7), budget=st.sampled_from([1, 2, 5, 50]))
    def check(spread: list[tuple[int, int, bool]], limit: int, budget: int) -> None:
        for tag in tags:
            dlq_engine.client.delete(dlq_engine.keys.dlq(tag))
        refs, seqs = [], dict.fromkeys(tags, (0, -1))
        # Milliseconds 1-6 only: many entries share one, within a partition and across them.
        for index, ms, typed in sorted(spread, key=lambda s: s[1]):
            tag = tags[index]
            last_ms, last_seq = seqs[tag]
            seq = last_seq + 1 if last_ms == ms else 0
            seqs[tag] = (ms, seq)
            refs.append(_add(dlq_engine, tag, f"{ms}-{seq}", type="t.b" if typed else "t.a"))
        monkeypatch.setattr(reads, "SCAN_BUDGET", budget)
        assert _pages(dlq_engine, limit) == _merged(refs)
        wanted = [ref for ref, (_, _, typed) in zip(refs, sorted(spread, key=lambda s: s[1]), strict=True) if typed]
        assert _pages(dlq_engine, limit, type="t.b") == _merged(wanted)

    check()


def test_a_cursor_stays_put_while_dead_letters_arrive(dlq_engine: Engine) -> None:
    plant_dead_letters(dlq_engine, 9, queue="qa")
    first = dlq_engine.dlq.list(limit=4)
    plant_dead_letters(dlq_engine, 5, queue="qa")  # newer than every listed one: before the cursor
    rest = _pages_from(dlq_engine, first.next_cursor)
    seen = [item["entry_id"] for item in first.items] + rest
    assert len(seen) == 9 == len(set(seen))


def _pages_from(engine: Engine, cursor: str | None) -> list[str]:
    seen: list[str] = []
    while cursor:
        page = engine.dlq.list(cursor=cursor, limit=2)
        seen.extend(item["entry_id"] for item in page.items)
        cursor = page.next_cursor
    return seen


def test_a_queue_filter_reads_only_that_queues_partitions(dlq_engine: Engine, redis_client: redis.Redis) -> None:
    plant_dead_letters(dlq_engine, 6, queue="qa")
    plant_dead_letters(dlq_engine, 4, queue="qc")
    calls = _script_calls(redis_client)
    page = dlq_engine.dlq.list(queue="qc")
    assert {item["queue"] for item in page.items} == {"qc"} and len(page.items) == 4
    assert _script_calls(redis_client) - calls == 2  # qc's two partitions, one call each
    assert dlq_engine.dlq.list(queue="nowhere").items == []
    assert dlq_engine.dlq.match_count(queue="qa") == {"count": 6, "exact": True}


def _script_calls(client: redis.Redis) -> int:
    """Script calls that ran so far, on every master of a cluster."""
    if isinstance(client, redis.cluster.RedisCluster):
        per_node = list(client.info("commandstats", target_nodes=redis.cluster.RedisCluster.PRIMARIES).values())
    else:
        per_node = [client.info("commandstats")]
    stats = [info.get("cmdstat_evalsha", {}) for info in per_node]
    return sum(int(s.get("calls", 0)) - int(s.get("failed_calls", 0)) for s in stats)


def test_counts_and_evictions_add_up_over_partitions(dlq_engine: Engine) -> None:
    capped = Engine(dataclasses.replace(dlq_engine.config, dlq_maxlen=3), client=dlq_engine.client,
                    clock=dlq_engine.clock)
    a, b, _ = capped.registry.ensure("qa").tags
    plant_dead_letters(capped, 5, queue="qa", tag=a)  # the cap is per partition: two evicted
    plant_dead_letters(capped, 4, queue="qa", tag=b)  # one evicted
    plant_dead_letters(capped, 2, queue="qc")
    assert capped.dlq.count() == 3 + 3 + 2 and capped.dlq.trimmed() == 3
    assert capped.dlq.match_count() == {"count": 8, "exact": True}


def test_groups_take_the_newest_dead_letters_of_every_partition(dlq_engine: Engine) -> None:
    a, b, c = dlq_engine.registry.ensure("qa").tags
    for ms in range(1, 5):
        _add(dlq_engine, a, f"{ms}-0", type="t.old")
    for ms, tag in itertools.product(range(10, 13), (b, c)):
        _add(dlq_engine, tag, f"{ms}-0", type="t.new")
    groups = dlq_engine.dlq.groups(window=6)
    assert [(g["type"], g["count"]) for g in groups["groups"]] == [("t.new", 6)]
    assert groups["partial"] and groups["scanned"] == 6
    assert groups["groups"][0]["latest_entry_id"] == dlq_ref(max(b, c), "12-0")
    everything = dlq_engine.dlq.groups(window=100)
    assert [(g["type"], g["count"]) for g in everything["groups"]] == [("t.new", 6), ("t.old", 4)]
    assert not everything["partial"]


def test_actions_by_id_task_id_and_filter_reach_every_partition(dlq_engine: Engine) -> None:
    qa = plant_dead_letters(dlq_engine, 9, queue="qa")
    qc = plant_dead_letters(dlq_engine, 4, queue="qc", type="t.c")
    assert len({task_id.split("-")[0] for task_id in qa}) == 3  # spread over qa's partitions
    refs = [dlq_engine.tasks.get(task_id)["dlq_entry_id"] for task_id in qa[:3]]
    assert dlq_engine.dlq.get(refs[0])["task_id"] == qa[0]
    assert dlq_engine.dlq.count_selected(DlqSelection(ids=(*refs, dlq_ref("nope", "1-0")))) == 3
    assert dlq_engine.dlq.retry(DlqSelection(ids=tuple(refs)), OPERATOR) == 3
    assert dlq_engine.dlq.retry(DlqSelection(task_ids=(qa[3], qa[4], "not-a-dtq-id")), OPERATOR) == 2
    assert {dlq_engine.tasks.get(t)["status"] for t in qa[:5]} == {"QUEUED"}
    assert dlq_engine.dlq.discard(DlqSelection(type="t.c"), OPERATOR) == 4
    assert {dlq_engine.tasks.get(t).get("dlq_discarded_at") is not None for t in qc} == {True}
    assert dlq_engine.dlq.retry(DlqSelection(all=True), OPERATOR) == 4
    assert dlq_engine.dlq.count() == 0 and dlq_engine.dlq.match_count(queue="qa")["count"] == 0


def test_a_stale_dead_letter_is_dropped_not_queued_twice(dlq_engine: Engine) -> None:
    # A retry writes the task back before it drops the dead letter: one cut short in between
    # leaves a dead letter whose task is QUEUED already, which the next retry drops.
    [task_id] = plant_dead_letters(dlq_engine, 1, queue="qa")
    ref = dlq_engine.tasks.get(task_id)["dlq_entry_id"]
    dlq_engine.client.hset(dlq_engine.keys.task(task_id), mapping={"status": "QUEUED", "dlq_entry_id": ""})
    assert dlq_engine.dlq.retry(DlqSelection(ids=(ref,)), OPERATOR) == 0
    assert dlq_engine.dlq.count() == 0
    tag = task_id.split("-")[0]
    assert sum(dlq_engine.client.xlen(stream) for stream in dlq_engine.keys.streams(tag, "qa")) == 0


def test_a_retry_into_a_deleted_queue_registers_it_again(dlq_engine: Engine) -> None:
    [task_id] = plant_dead_letters(dlq_engine, 1, queue="qd")
    ref = dlq_engine.tasks.get(task_id)["dlq_entry_id"]
    with pytest.raises(QueueNotEmpty, match="1 dead-lettered"):  # a delete leaves no dead letter behind
        dlq_engine.queues.delete("qd", OPERATOR)
    # A queue gone from the registry with its dead letters still there (removed by hand, or
    # deleted before deletes refused queues with dead letters): its partition is a tombstone.
    old = dlq_engine.registry.get("qd", fresh=True)
    assert old is not None
    dlq_engine.client.hdel(dlq_engine.keys.queues(), "qd")
    for tag in old.all_tags:
        dlq_engine.client.set(dlq_engine.keys.owner(tag), f"deleted|{old.owner}")
    assert dlq_engine.registry.get("qd", fresh=True) is None
    assert dlq_engine.dlq.get(ref)["task_id"] == task_id  # its id still finds it
    assert dlq_engine.dlq.retry(DlqSelection(task_ids=(task_id,)), OPERATOR) == 1
    layout = dlq_engine.registry.get("qd", fresh=True)
    assert layout is not None and task_id.split("-")[0] in layout.tags
    assert dlq_engine.tasks.get(task_id)["status"] == "QUEUED"
    assert dlq_engine.queues.get("qd")["waiting"] == 1
