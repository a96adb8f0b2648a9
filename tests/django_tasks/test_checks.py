"""System checks for a misconfigured DtqBackend."""

from __future__ import annotations

from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from .conftest import BACKEND

OURS = {"dtq.E701", "dtq.E702", "dtq.E703", "dtq.W701"}  # other dtq checks (e.g. API key) are not ours


def ids(settings: Any, tasks: dict[str, Any]) -> list[str]:
    settings.TASKS = {"default": {"BACKEND": BACKEND, **tasks}}
    return sorted(m.id for m in checks.run_checks() if m.id in OURS)


def test_the_default_settings_pass(settings: Any) -> None:
    assert ids(settings, {"QUEUES": ["default"]}) == []


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379", "redis://", "redis://host:port/0", "nonsense", 5])
def test_a_bad_redis_url_is_an_error(settings: Any, url: Any) -> None:
    assert ids(settings, {"OPTIONS": {"REDIS_URL": url}}) == ["dtq.E701"]


@pytest.mark.parametrize("queue", ["Emails", "dlq", "audit", "a b", "x" * 65, ""])
def test_a_queue_name_dtq_cannot_use_is_an_error(settings: Any, queue: str) -> None:
    assert ids(settings, {"QUEUES": ["default", queue]}) == ["dtq.E702"]


@pytest.mark.parametrize("options", [
    {"HIGH_PRIORITY_MIN": 0, "LOW_PRIORITY_MAX": 0}, {"HIGH_PRIORITY_MIN": 101}, {"LOW_PRIORITY_MAX": 1.5},
    {"MAX_ATTEMPTS": 0}, {"TIMEOUT_SECONDS": -1}, {"ENQUEUE_ON_COMMIT": "yes"},
])
def test_bad_option_values_are_errors(settings: Any, options: dict[str, Any]) -> None:
    assert ids(settings, {"OPTIONS": options}) == ["dtq.E703"]


def test_an_unknown_option_is_a_warning(settings: Any) -> None:
    assert ids(settings, {"OPTIONS": {"REDIS_URLS": "redis://x"}}) == ["dtq.W701"]


def test_manage_py_check_stops_on_the_error(settings: Any) -> None:
    settings.TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["Bad"]}}
    with pytest.raises(SystemCheckError, match="dtq.E702"):
        call_command("check")
