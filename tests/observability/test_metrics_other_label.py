"""dtq_tasks_total only grows, under "other" too (docs/observability.md: the counters only reset
if Redis loses its data). Which queues and types keep a label is decided once, for good, and
shared by every API replica (the hash <prefix>:metrics:labels): a value seen while its kind has
room keeps its label, any later one is counted under "other" forever. So "other" sums a fixed
set of counters that only grow."""

from __future__ import annotations

from collections.abc import Callable

from dtq_core.engine import Engine
from dtq_core.metrics import (
    MAX_QUEUE_LABELS,
    OTHER,
    TYPE,
    UNREGISTERED_TYPE,
    keep_labels,
    label_field,
)
from tests.api.support import drain, make_dead_letters

from .conftest import Scrape


def fill_queue_labels(engine: Engine, scrape: Callable[..., Scrape]) -> list[str]:
    """Run two tasks on each of MAX_QUEUE_LABELS queues and scrape: every queue label is taken."""
    queues = [f"q{i:03d}" for i in range(MAX_QUEUE_LABELS)]
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", {}, queue=q) for q in queues for _ in range(2)])
    drain(engine.config, queues=queues)
    scrape()
    return queues


def dead_lettered_other(m: Scrape) -> float | None:
    return m.value("dtq_tasks_total", queue=OTHER, type="dtq.fail", outcome="dead_lettered")


def test_the_other_queue_counter_never_goes_back(live_engine: Engine, scrape: Callable[..., Scrape]) -> None:
    fill_queue_labels(live_engine, scrape)
    make_dead_letters(live_engine, 1, queue="zy")
    make_dead_letters(live_engine, 1, queue="zz")
    before = dead_lettered_other(scrape())
    assert before == 2
    # zz becomes busier than most kept queues: recomputing the top 100 would take it out of
    # "other", which Prometheus reads as a counter reset (increase() invents dead letters).
    make_dead_letters(live_engine, 2, queue="zz")
    assert dead_lettered_other(scrape()) == 4


def test_every_replica_keeps_the_labels_the_first_scrape_chose(live_engine: Engine,
                                                              scrape: Callable[..., Scrape]) -> None:
    queues = fill_queue_labels(live_engine, scrape)
    make_dead_letters(live_engine, 3, queue="late")
    scrape()
    # It should read the choice from Redis, not from this process: forgetting it here changes nothing.
    decided = live_engine.client.hgetall(live_engine.keys.metrics_labels())
    assert decided[label_field("queue", "late")] == "other"
    assert all(decided[label_field("queue", q)] == "kept" for q in queues)
    m = scrape()
    assert m.value("dtq_tasks_total", queue="late", type="dtq.fail", outcome="dead_lettered") is None
    assert dead_lettered_other(m) == 3


def test_deleting_the_labels_hash_starts_the_choice_over(live_engine: Engine,
                                                         scrape: Callable[..., Scrape]) -> None:
    queues = fill_queue_labels(live_engine, scrape)
    make_dead_letters(live_engine, 3, queue="late")
    assert dead_lettered_other(scrape()) == 3
    live_engine.client.delete(live_engine.keys.metrics_labels())  # what docs/observability.md tells operators
    m = scrape()
    # Chosen again from the busiest: "late" (3 tasks) beats a queue of 2.
    assert m.value("dtq_tasks_total", queue="late", type="dtq.fail", outcome="dead_lettered") == 3
    assert sum(1 for q in queues if m.value("dtq_tasks_total", queue=q, type="dtq.echo", outcome="succeeded")) \
        == MAX_QUEUE_LABELS - 1


def test_a_type_left_in_other_stays_there_once_a_worker_registers_it(live_engine: Engine) -> None:
    counts = {("q", f"junk{i:03d}", "dead_lettered"): 1.0 for i in range(150)}
    first = keep_labels(live_engine.scripts, live_engine.keys, counts, types=frozenset(), decided={})
    assert first[label_field(UNREGISTERED_TYPE, "junk149")] == "other"
    # Registered now (a new worker version serves it), with room among registered types: still
    # other, or its past counts would leave "other" and it would go back.
    again = keep_labels(live_engine.scripts, live_engine.keys, counts, types={"junk149"}, decided={})
    assert again[label_field(TYPE, "junk149")] == "other"
    assert again[label_field(TYPE, "junk000")] == "kept"
