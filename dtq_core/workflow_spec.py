"""A workflow's structure, checked: the tree of chains, groups and steps that dtq_tasks.chain /
dtq_tasks.group build and that POST /api/v1/workflows takes as JSON, flattened into steps with
their dependencies and the shape of the input each step receives (docs/tasks.md, "Workflows").

    {"chain": [node, ...]}
    {"group": [node, ...], "then": node | null, "tolerate_failures": false}
    {"type": ..., "payload": ..., "queue": ..., ...}      # a step: the body POST /api/v1/tasks takes

Results flow on: a step's input (its task context's parent_result) is the output of what comes
before it in its chain. A step's output is its result; a chain's, its last node's; a group's, the
list of its members' outputs in order, or, with `then`, the then-node's output. A group's members
all receive the group's own input. This module is pure (no Redis): the engine stores what it
makes (engine/workflows.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .config import DtqConfig
from .errors import PayloadTooLarge, ValidationError
from .submit import Submission, validate

MAX_DEPTH = 32
STEP_FIELDS = frozenset({"type", "payload", "queue", "priority", "max_attempts", "timeout_seconds",
                         "ttl_seconds", "delay_seconds", "group_key"})
GROUP_FIELDS = frozenset({"group", "then", "tolerate_failures"})

# An input expression: None (no input), a step index (that step's result), or a list of
# expressions (a JSON list of their values, in order).
Input = None | int | list[Any]


@dataclass(slots=True)
class StepSpec:
    index: int
    submission: Submission
    input: Input
    depends_on: list[int]
    # The tolerated member the step is in, "" for none: each member of a group with
    # tolerate_failures is numbered ("3"), a member of a tolerating group nested in it "3.5"; a
    # group's `then` is in the member the group itself is in. A failure ends the innermost member
    # it is in (advanceWorkflow-1.lua), so a failed step never feeds the steps after it there.
    member: str
    successors: list[int] = field(default_factory=list)
    path: str = ""  # where it was written, e.g. "chain[2]" (for messages)


@dataclass(slots=True)
class WorkflowSpec:
    steps: list[StepSpec]
    root: dict[str, Any]  # the tree as the API shows it: {"kind": "chain"|"group"|"step", ...}

    @property
    def roots(self) -> list[StepSpec]:
        """The steps with no dependency: created when the workflow is submitted."""
        return [s for s in self.steps if not s.depends_on]


def leaves(expr: Input) -> list[int]:
    """The step indexes an input expression reads, in order, each once."""
    out: list[int] = []
    stack: list[Any] = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, int):
            out.append(e)
        elif isinstance(e, list):
            stack.extend(reversed(e))
    return list(dict.fromkeys(out))


class _Builder:
    def __init__(self, config: DtqConfig) -> None:
        self.config = config
        self.steps: list[StepSpec] = []
        self.members = 0

    def node(self, obj: Any, path: str, input: Input, member: str, depth: int) -> tuple[Input, dict[str, Any]]:
        """Add the node's steps; return (its output expression, its tree for the API)."""
        where = path or "workflow"
        if depth > MAX_DEPTH:
            raise ValidationError(f"{where}: workflows nest at most {MAX_DEPTH} levels deep", field=path or None)
        if not isinstance(obj, dict):
            raise ValidationError(f"{where} must be an object: a step, {{\"chain\": [...]}} or {{\"group\": [...]}}",
                                  field=path or None)
        prefix = f"{path}." if path else ""
        if "chain" in obj:
            extra = sorted(set(obj) - {"chain"})
            if extra:
                raise ValidationError(f"{where}: a chain takes only \"chain\" (not {', '.join(extra)})",
                                      field=prefix + extra[0])
            children = self._list(obj["chain"], prefix + "chain")
            out, trees = input, []
            for i, child in enumerate(children):
                out, tree = self.node(child, f"{prefix}chain[{i}]", out, member, depth + 1)
                trees.append(tree)
            return out, {"kind": "chain", "children": trees}
        if "group" in obj:
            extra = sorted(set(obj) - GROUP_FIELDS)
            if extra:
                raise ValidationError(f"{where}: a group takes only group, then and tolerate_failures "
                                      f"(not {', '.join(extra)})", field=prefix + extra[0])
            tolerate = obj.get("tolerate_failures", False)
            if not isinstance(tolerate, bool):
                raise ValidationError("tolerate_failures must be true or false", field=prefix + "tolerate_failures")
            children = self._list(obj["group"], prefix + "group")
            outs, trees = [], []
            for i, child in enumerate(children):
                inner = member
                if tolerate:
                    self.members += 1
                    inner = f"{member}.{self.members}" if member else str(self.members)
                out, tree = self.node(child, f"{prefix}group[{i}]", input, inner, depth + 1)
                outs.append(out)
                trees.append(tree)
            group_out: Input = outs
            then_tree = None
            if obj.get("then") is not None:
                group_out, then_tree = self.node(obj["then"], prefix + "then", outs, member, depth + 1)
            return group_out, {"kind": "group", "children": trees, "then": then_tree, "tolerate_failures": tolerate}
        return self.step(obj, path, input, member)

    def _list(self, value: Any, path: str) -> list[Any]:
        if not isinstance(value, list) or not value:
            raise ValidationError(f"{path} must be a list of at least one step", field=path)
        if len(self.steps) + len(value) > self.config.workflow_max_steps:
            raise self._too_many(path)
        return value

    def _too_many(self, path: str) -> ValidationError:
        return ValidationError(f"a workflow has at most {self.config.workflow_max_steps} steps "
                               "(DTQ_WORKFLOW_MAX_STEPS)", field=path)

    def step(self, obj: dict[str, Any], path: str, input: Input, member: str) -> tuple[Input, dict[str, Any]]:
        prefix = f"{path}." if path else ""
        extra = sorted(set(obj) - STEP_FIELDS)
        if extra:
            raise ValidationError(f"{path or 'step'}: unknown field {extra[0]!r} (a step takes "
                                  f"{', '.join(sorted(STEP_FIELDS))}; or write a chain or a group)",
                                  field=prefix + extra[0])
        if "type" not in obj:
            raise ValidationError(f"{path or 'step'}: a step needs a type (or write a chain or a group)",
                                  field=prefix + "type")
        if len(self.steps) >= self.config.workflow_max_steps:
            raise self._too_many(path)
        try:
            submission = validate(
                self.config, obj["type"], obj.get("payload"), queue=obj.get("queue", "default"),
                priority=obj.get("priority", "normal"), delay_seconds=obj.get("delay_seconds", 0),
                ttl_seconds=obj.get("ttl_seconds"), max_attempts=obj.get("max_attempts"),
                timeout_seconds=obj.get("timeout_seconds"), group_key=obj.get("group_key"))
        except ValidationError as exc:
            name = prefix + (exc.field or "")
            cls = PayloadTooLarge if isinstance(exc, PayloadTooLarge) else ValidationError
            raise cls(f"{path}: {exc.message}" if path else exc.message, field=name.rstrip(".") or None) from None
        index = len(self.steps)
        self.steps.append(StepSpec(index=index, submission=submission, input=input, depends_on=leaves(input),
                                   member=member, path=path))
        return index, {"kind": "step", "index": index}


def parse(obj: Any, config: DtqConfig) -> WorkflowSpec:
    """Check a workflow written as JSON (see the module's docstring); ValidationError (or
    PayloadTooLarge) names the field, e.g. field="chain[2].payload"."""
    builder = _Builder(config)
    try:
        _, root = builder.node(obj, "", None, "", 0)
    except RecursionError:
        raise ValidationError(f"workflows nest at most {MAX_DEPTH} levels deep") from None
    for step in builder.steps:
        for dep in step.depends_on:
            builder.steps[dep].successors.append(step.index)
    return WorkflowSpec(steps=builder.steps, root=root)
