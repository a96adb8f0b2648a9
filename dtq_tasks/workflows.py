"""Workflows in Python: `step`, `chain` and `group` build the tree that POST /api/v1/workflows takes
as JSON, and `.enqueue()` submits it (docs/tasks.md, "Workflows").

    wf = dtq_tasks.chain(
        dtq_tasks.step("report.fetch", {"day": "2026-12-01"}),
        dtq_tasks.group([dtq_tasks.step(render, {"page": n}) for n in range(3)],
                        then=dtq_tasks.step("report.publish", queue="slow")),
    )
    workflow_id = wf.enqueue()

A step is a task type (or a @dtq_tasks.task function: its type is the one it was registered
under) with its payload and options. A chain step receives its predecessor's result, a group's
`then` the list of its members' results, as dtq_tasks.current_task().parent_result.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from dtq_core.conf import get_engine


class _Node:
    def to_dict(self) -> dict[str, Any]:
        raise NotImplementedError

    def enqueue(self, request_id: str | None = None) -> str:
        """Submit the workflow this node is the root of; return the workflow id. Raises
        dtq_core.errors.ValidationError (its field names the step, e.g. "chain[2].payload"),
        PayloadTooLarge, UnknownTaskType or QueueLimitReached."""
        return get_engine().workflows.submit(self.to_dict(), request_id=request_id)


@dataclass(frozen=True, slots=True)
class Step(_Node):
    type: str
    payload: Any = None
    options: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "payload": self.payload, **self.options}


@dataclass(frozen=True, slots=True)
class Chain(_Node):
    steps: tuple[_Node, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"chain": [s.to_dict() for s in self.steps]}


@dataclass(frozen=True, slots=True)
class Group(_Node):
    steps: tuple[_Node, ...]
    then: _Node | None = None
    tolerate_failures: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"group": [s.to_dict() for s in self.steps],
                "then": None if self.then is None else self.then.to_dict(),
                "tolerate_failures": self.tolerate_failures}


def _type_of(type_or_fn: Any) -> str:
    if isinstance(type_or_fn, str):
        return type_or_fn
    name = getattr(type_or_fn, "dtq_task_type", None)
    if isinstance(name, str):
        return name
    raise TypeError(f"a workflow step is a task type name or a @dtq_tasks.task function, not {type_or_fn!r}")


def _node(value: Any) -> _Node:
    if isinstance(value, _Node):
        return value
    if callable(value) and isinstance(getattr(value, "dtq_task_type", None), str):
        return step(value)  # a @dtq_tasks.task function alone: a step with no payload
    raise TypeError(f"expected a step, chain or group (dtq_tasks.step/chain/group), not {value!r}")


def step(type_or_fn: Any, payload: Any = None, *, queue: str = "default", priority: str = "normal",
         max_attempts: int | None = None, timeout_seconds: float | None = None,
         ttl_seconds: float | None = None, group_key: str | None = None,
         delay_seconds: float | None = None) -> Step:
    """One step: a task of this type (or @dtq_tasks.task function) with its payload and options."""
    options: dict[str, Any] = {"queue": queue, "priority": priority}
    for name, value in (("max_attempts", max_attempts), ("timeout_seconds", timeout_seconds),
                        ("ttl_seconds", ttl_seconds), ("group_key", group_key), ("delay_seconds", delay_seconds)):
        if value is not None:
            options[name] = value
    return Step(_type_of(type_or_fn), payload, options)


def chain(*steps: Any) -> Chain:
    """Steps run one after another, each receiving the previous one's result."""
    return Chain(tuple(_node(s) for s in steps))


def group(steps: Iterable[Any], *, then: Any = None, tolerate_failures: bool = False) -> Group:
    """Steps run side by side; `then` (a chord's callback) runs once all have finished, with the
    list of their results in order. tolerate_failures: a member that fails counts as finished,
    its {"error": {...}} in place of its result, instead of failing the workflow."""
    return Group(tuple(_node(s) for s in steps), None if then is None else _node(then), tolerate_failures)
