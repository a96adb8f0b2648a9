"""Helpers for the observability tests: scrape /metrics and read samples by name and labels."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families


@dataclass
class Scrape:
    status: int
    elapsed_s: float
    text: str
    samples: dict[str, list[tuple[dict[str, str], float]]]

    def value(self, name: str, **labels: str) -> float | None:
        """The value of the one sample named `name` whose labels include `labels` (None if absent)."""
        matches = [v for lbls, v in self.samples.get(name, []) if all(lbls.get(k) == w for k, w in labels.items())]
        assert len(matches) <= 1, f"{name}{labels} matches {len(matches)} samples"
        return matches[0] if matches else None


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


@pytest.fixture
def scrape() -> Callable[..., Scrape]:
    client = Client()

    def get(**headers: str) -> Scrape:
        started = time.monotonic()
        response = client.get("/metrics", headers=headers)
        elapsed = time.monotonic() - started
        text = response.content.decode()
        return Scrape(response.status_code, elapsed, text, parse(text) if response.status_code == 200 else {})

    return get
