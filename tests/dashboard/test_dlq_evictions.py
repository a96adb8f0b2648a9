"""When the DLQ cap evicts dead letters, /dlq/ and /metrics both say how many, from real evictions."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.test import Client

from dtq_core.engine import Engine
from tests.api.support import make_dead_letters


def test_evictions_by_the_cap_show_on_the_dlq_page_and_in_metrics(
        client: Client, live_engine: Engine, settings: Any) -> None:
    settings.DTQ = {**settings.DTQ, "DLQ_MAXLEN": 3}
    capped = Engine(dataclasses.replace(live_engine.config, dlq_maxlen=3), client=live_engine.client)
    make_dead_letters(capped, 5)  # the worker dead-letters five against a cap of three
    assert capped.dlq.count() == 3
    assert "2 evicted by the cap of 3 (DTQ_DLQ_MAXLEN)" in client.get("/dlq/").content.decode()
    assert "dtq_dlq_trimmed_total 2.0" in client.get("/metrics").content.decode()
