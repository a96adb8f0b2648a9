"""A dead letter damaged in Redis (a field edited by hand, or written by a bug) is listed alone as
damaged: the DLQ listing, the dead letter's own page and the console's DLQ page still answer
(docs/failure-modes.md: corrupt records are dealt with alone, the rest go through)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection
from dtq_core.keys import dlq_ref

from ..dead_letters import plant_dead_letters


@pytest.fixture
def damaged(live_engine: Engine, dtq_settings: Any) -> tuple[list[str], str]:
    """Two sound dead letters of queue "damaged" and, after them, one whose attempt is not a number
    and whose failed_at is not a time: (the sound ones' task ids, the damaged one's id)."""
    good = plant_dead_letters(live_engine, 2, queue="damaged")
    tag = good[0].split("-")[0]
    entry_id = live_engine.client.xadd(live_engine.keys.dlq(tag), {
        "task_id": f"{tag}-deadbeef", "queue": "damaged", "type": "dtq.fail", "attempt": "one",
        "error_class": "X", "error": "x", "failed_at": "yesterday"})
    return good, dlq_ref(tag, entry_id)


def test_one_damaged_dead_letter_does_not_fail_the_dlq_listing(damaged: tuple[list[str], str]) -> None:
    good, ref = damaged
    response = Client(raise_request_exception=False).get("/api/v1/dlq", {"queue": "damaged"})
    assert response.status_code == 200, (response.status_code, response.content[:300])
    items = {item["entry_id"]: item for item in response.json()["results"]}
    assert {item["task_id"] for item in items.values()} >= set(good)
    # It should show what does not read as null, keep the stored text beside it and say why.
    assert {k: items[ref][k] for k in ("attempt", "attempt_corrupt", "failed_at", "failed_at_corrupt", "damaged")} \
        == {"attempt": None, "attempt_corrupt": "one", "failed_at": None, "failed_at_corrupt": "yesterday",
            "damaged": True}
    assert not any("damaged" in item for key, item in items.items() if key != ref)


def test_a_damaged_dead_letters_own_page_and_the_console_answer(damaged: tuple[list[str], str]) -> None:
    _, ref = damaged
    client = Client(raise_request_exception=False)
    response = client.get(f"/api/v1/dlq/{ref}")
    assert response.status_code == 200, response.content[:300]
    assert (response.json()["damaged"], response.json()["task"]) == (True, None)
    page = client.get("/dlq/", {"queue": "damaged"})
    assert page.status_code == 200, page.content[:300]
    assert "deadbeef" in page.content.decode()
    assert ">damaged</span>" in page.content.decode() and ">None<" not in page.content.decode()


def test_a_damaged_dead_letter_is_grouped_and_can_be_discarded(live_engine: Engine,
                                                                damaged: tuple[list[str], str]) -> None:
    _, ref = damaged
    groups = live_engine.dlq.groups(queue="damaged")["groups"]
    assert sum(g["count"] for g in groups) == 3
    assert live_engine.dlq.discard(DlqSelection(ids=[ref]), Actor.cli()) == 1
    assert ref not in {item["entry_id"] for item in live_engine.dlq.list(queue="damaged").items}
