"""dtq_tasks_total keeps a bounded set of label values: of 1,000 junk task types (or queues) at
most a fixed number keep a label, the rest are counted under "other", not exported as 1,000 new
series; the types workers registered always keep theirs."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from dtq_core.engine import Engine
from dtq_core.metrics import MAX_QUEUE_LABELS, MAX_UNREGISTERED_TYPE_LABELS, OTHER, bounded_tasks
from tests.api.support import drain

from .conftest import Scrape

JUNK = 1000


def tasks_series(scrape: Scrape) -> list[tuple[dict[str, str], float]]:
    return scrape.samples.get("dtq_tasks_total", [])


def dtq_text(scrape: Scrape) -> str:
    # Only dtq's own series: django-prometheus' request metrics grow with the scrapes themselves.
    return "".join(line for line in scrape.text.splitlines(keepends=True) if "dtq_" in line)


def test_a_thousand_junk_types_do_not_grow_metrics(live_engine: Engine, scrape: Callable[..., Scrape]) -> None:
    live_engine.tasks.enqueue_many([live_engine.tasks.validate("dtq.echo", {}) for _ in range(3)])
    drain(live_engine.config, queues=["default"])  # a worker ran: it registered the types it serves
    before = scrape()
    assert {s["type"] for s, _ in tasks_series(before)} == {"dtq.echo"}

    # Junk that got in anyway (DTQ_ACCEPT_UNKNOWN_TYPES=true): each type dead-letters once.
    open_engine = Engine(dataclasses.replace(live_engine.config, accept_unknown_types=True), client=live_engine.client)
    open_engine.tasks.enqueue_many([open_engine.tasks.validate(f"junk.t{i:04d}", {}, max_attempts=1)
                                    for i in range(JUNK)])
    drain(live_engine.config, queues=["default"])
    (tag,) = live_engine.registry.ensure("default").tags
    assert live_engine.client.hlen(live_engine.keys.stats_tasks(tag)) == JUNK + 1  # Redis keeps the detail

    after = scrape()
    assert after.status == 200
    labels = {s["type"] for s, _ in tasks_series(after)}
    assert {"dtq.echo", OTHER} <= labels and len(labels) == 2 + MAX_UNREGISTERED_TYPE_LABELS
    kept = MAX_UNREGISTERED_TYPE_LABELS
    assert after.value("dtq_tasks_total", queue="default", type=OTHER, outcome="dead_lettered") == JUNK - kept
    assert after.value("dtq_tasks_total", queue="default", type="dtq.echo", outcome="succeeded") == 3
    # At most one series per kept type (about 80 bytes each), not one per junk type.
    assert len(dtq_text(after)) - len(dtq_text(before)) < (kept + 1) * 120, "each junk type grew /metrics"


def test_registered_types_keep_their_labels_however_much_junk_there_is() -> None:
    counts = {("q", f"junk{i}", "dead_lettered"): 50.0 for i in range(1000)}
    counts[("q", "app.send", "succeeded")] = 1.0
    folded = bounded_tasks(counts, types={"app.send"})
    assert folded[("q", "app.send", "succeeded")] == 1.0
    assert folded[("q", OTHER, "dead_lettered")] == 50.0 * (1000 - MAX_UNREGISTERED_TYPE_LABELS)


def test_label_values_are_capped_even_before_any_worker_registered() -> None:
    counts = {(f"q{i % 300}", f"t{i}", "succeeded"): float(i + 1) for i in range(1000)}
    folded = bounded_tasks(counts, types=frozenset())
    assert len({t for _, t, _ in folded}) == MAX_UNREGISTERED_TYPE_LABELS + 1
    assert len({q for q, _, _ in folded}) == MAX_QUEUE_LABELS + 1
    assert sum(folded.values()) == sum(counts.values())  # folded, not dropped
    assert ("q999", "t999", "succeeded") not in folded and ("q99", "t999", "succeeded") in folded
