"""The @dtq_tasks.task decorator: what it accepts and what it refuses at decoration time."""

from __future__ import annotations

import pytest

import dtq_tasks
from dtq_core import registry


@pytest.mark.parametrize("target", [42, "dtq.echo", None, {"not": "callable"}])
def test_it_refuses_to_register_something_that_cannot_be_called(target: object) -> None:
    # It should fail where the mistake is, not when a worker first runs the task.
    with pytest.raises(TypeError, match=r"@dtq_tasks.task\('tests.not_callable'\) must decorate a function"):
        dtq_tasks.task("tests.not_callable")(target)  # type: ignore[type-var]
    assert registry.get("tests.not_callable") is None


def test_it_registers_a_callable_and_returns_it_unchanged() -> None:
    def handler(payload: object) -> object:
        return payload

    assert dtq_tasks.task("tests.decorated")(handler) is handler
    assert registry.get("tests.decorated").fn is handler  # type: ignore[union-attr]


@pytest.mark.parametrize("name", ["", "has space", 42])
def test_it_refuses_a_bad_task_type_name(name: object) -> None:
    with pytest.raises(ValueError, match="invalid task type name"):
        dtq_tasks.task(name)  # type: ignore[arg-type]
