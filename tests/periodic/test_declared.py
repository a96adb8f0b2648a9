"""Declaring schedules in code: @dtq_tasks.periodic beside a handler, and settings.DTQ_PERIODIC.
(Their sync at worker start: tests/failure/test_periodic.py, with real workers.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import dtq_tasks
from dtq_core import periodic_declared, registry
from dtq_core.conf import declared_periodic
from dtq_core.config import ConfigError


@pytest.fixture
def declared() -> Iterator[None]:
    before = {spec.name for spec in periodic_declared.declared()}
    yield
    for spec in periodic_declared.declared():
        if spec.name not in before:
            periodic_declared.forget(spec.name)


def test_the_decorator_registers_the_handler_and_declares_the_schedule(declared: None) -> None:
    @dtq_tasks.periodic("test.nightly", cron="0 3 * * *", timezone="Europe/Berlin", queue="reports",
                        priority="high", payload={"full": True}, overlap="skip", misfire="run_once")
    def nightly(payload: Any) -> Any:
        return payload

    entry = registry.get("test.nightly")
    assert entry is not None and entry.fn is nightly
    [spec] = [s for s in periodic_declared.declared() if s.name == "test.nightly"]
    assert (spec.type, spec.cron, spec.timezone, spec.queue, spec.priority, spec.payload, spec.overlap,
            spec.misfire, spec.source) == ("test.nightly", "0 3 * * *", "Europe/Berlin", "reports", "high",
                                           {"full": True}, "skip", "run_once", "code")


def test_a_schedule_may_fire_another_type(declared: None) -> None:
    @dtq_tasks.periodic("test.hourly-cleanup", every_seconds=3600, type="test.cleanup")
    def cleanup(payload: Any) -> None:
        return None

    assert registry.get("test.cleanup") is not None
    assert [s.type for s in periodic_declared.declared() if s.name == "test.hourly-cleanup"] == ["test.cleanup"]


@pytest.mark.parametrize("kwargs", [{"cron": "nope"}, {}, {"every_seconds": 0}, {"cron": "0 3 * * *",
                                                                                  "timezone": "Nowhere/Town"}])
def test_a_wrong_declaration_fails_at_import(declared: None, kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="test.bad"):
        dtq_tasks.periodic("test.bad", **kwargs)


def test_the_same_name_declared_twice_differently_is_refused(declared: None) -> None:
    dtq_tasks.periodic("test.twice", every_seconds=5, type="dtq.echo")(registry.get("dtq.echo").fn)  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="already declared"):
        dtq_tasks.periodic("test.twice", every_seconds=6, type="dtq.echo")(registry.get("dtq.echo").fn)  # type: ignore[union-attr]


def test_settings_declare_schedules_too(declared: None, settings: Any) -> None:
    settings.DTQ_PERIODIC = [{"name": "test.from-settings", "type": "dtq.echo", "every_seconds": 30}]
    specs = {s.name: s for s in declared_periodic()}
    assert specs["test.from-settings"].source == "code" and specs["test.from-settings"].every_seconds == 30
    settings.DTQ_PERIODIC = [{"name": "test.from-settings", "type": "dtq.echo", "every_seconds": 30, "when": 1}]
    with pytest.raises(ConfigError, match=r"DTQ_PERIODIC\[0\]: unknown field 'when'"):
        declared_periodic()
    settings.DTQ_PERIODIC = [{"name": "x", "type": "dtq.echo", "every_seconds": 1}] * 2
    with pytest.raises(ConfigError, match="declared twice"):
        declared_periodic()


def test_a_worker_refuses_to_start_with_a_wrong_declaration(start_worker: Any) -> None:
    worker = start_worker("--name", "bad", DTQ_TASK_MODULES="tests.periodic.declared_bad")
    assert worker.wait(60) != 0
    assert "periodic schedules: queue must match" in worker.output()
