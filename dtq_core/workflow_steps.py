"""What the workflow scripts are sent and what they answer, shared by the engine (submit, cancel)
and the worker (advances). Pure: no Redis here (docs/tasks.md, "Workflows").

A step's definition, stored in the workflow's `def` hash (createWorkflow-1.lua), is JSON:
    {"t": task id, "i": input expression, "succ": [successor indexes],
     "tol": 0, or the tolerated member the step is in ("3", nested "3.5": StepSpec.member),
     "x": {"type", "queue", "priority", "payload" (JSON text), "ma", "to", "ttl", "delay", "gk", "h", "rid"}}
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from .clock import iso
from .codec import truncate_result
from .config import DtqConfig
from .keys import Keys, tag_of, workflow_tag
from .submit import Submission
from .workflow_spec import StepSpec

CHUNK = 500  # steps one script call creates or defines at most
RECENT_CAP = 100_000  # as engine.tasks: the recent-tasks index each partition keeps
REDRIVE_AFTER_MS = 5000  # an outbox entry this old is re-driven by the leader

Call = tuple[str, list[str], list[object]]


def new_workflow_id(tag: str) -> str:
    """`<tag>-w<31 hex>`: the tag of the partition holding the workflow (keys.WORKFLOW_ID_RE)."""
    return f"{tag}-w{os.urandom(16).hex()[:31]}"


def definition(step: StepSpec, s: Submission) -> str:
    """The step's stored definition (s: its submission, placed: it carries the task id)."""
    return json.dumps({
        "t": s.task_id, "i": step.input, "succ": step.successors, "tol": step.member or 0,
        "x": {"type": s.type, "queue": s.queue, "priority": s.priority, "payload": s.payload_json,
              "ma": s.max_attempts, "to": s.timeout_s, "ttl": s.ttl_s, "delay": s.delay_s, "gk": s.group_key,
              "h": s.handler, "rid": s.request_id or ""},
    }, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Ready:
    """A step an advance found ready to create: its workflow, index, definition and input."""

    workflow_id: str
    index: int
    definition: dict[str, Any]
    input_json: str  # "null" for a step with no input

    @property
    def task_id(self) -> str:
        return str(self.definition["t"])


def step_record(ready: Ready, now_ms: int, max_input_bytes: int) -> list[object]:
    """createSteps' entry for one step: [task id, queue, priority, due, [field, value, ...]]. An input
    longer than max_input_bytes (DTQ_PAYLOAD_MAX_BYTES) is cut as a result is (a JSON string
    holding its head; the record says parent_result_truncated = 1)."""
    x = ready.definition["x"]
    due = now_ms + int(x["delay"] * 1000) if x.get("delay") else 0
    expires = now_ms + int(x["ttl"] * 1000) if x.get("ttl") else ""
    fields: list[object] = [
        "type", x["type"], "queue", x["queue"], "priority", x["priority"], "payload", x["payload"],
        "max_attempts", x["ma"], "timeout_s", f"{x['to']:g}", "workflow_id", ready.workflow_id,
        "workflow_step", ready.index,
    ]
    if expires:  # a field at its default is not written (engine/tasks.py: a lean record)
        fields += ["expires_at", expires]
    if x.get("rid"):
        fields += ["request_id", x["rid"]]
    if x.get("h"):
        fields += ["handler", x["h"]]
    if x.get("gk"):
        fields += ["group_key", x["gk"]]
    if ready.input_json != "null":
        parent, cut = truncate_result(ready.input_json, max_input_bytes)
        fields += ["parent_result", parent]
        if cut:
            fields += ["parent_result_truncated", 1]
    return [ready.task_id, x["queue"], x["priority"], due, fields]


def _by_partition(ready: list[Ready]) -> list[list[Ready]]:
    """The steps of each createSteps call: one call per partition (per CHUNK)."""
    by_tag: dict[str, list[Ready]] = {}
    for r in ready:
        by_tag.setdefault(tag_of(r.task_id), []).append(r)
    return [steps[i:i + CHUNK] for steps in by_tag.values() for i in range(0, len(steps), CHUNK)]


def create_calls(keys: Keys, config: DtqConfig, ready: list[Ready], now_ms: int, events: int) -> list[Call]:
    """createSteps calls for these steps: one per partition (per CHUNK); created_and_closed reads
    their replies."""
    return [("createSteps", [keys.partition(tag_of(steps[0].task_id))],
             [now_ms, iso(now_ms), config.task_retention_s * 1000, config.idem_ttl_s * 1000, RECENT_CAP, events,
              json.dumps([step_record(r, now_ms, config.payload_max_bytes) for r in steps], separators=(",", ":"))])
            for steps in _by_partition(ready)]


def created_and_closed(ready: list[Ready], replies: list[Any]) -> tuple[list[Ready], list[Ready]]:
    """(the steps whose task exists now, those refused: their partition no longer serves their
    queue), from the replies of create_calls(ready)."""
    made: list[Ready] = []
    closed: list[Ready] = []
    for steps, reply in zip(_by_partition(ready), replies, strict=True):
        for r, outcome in zip(steps, reply, strict=True):
            (closed if outcome == "closed" else made).append(r)
    return made, closed


def start_calls(keys: Keys, config: DtqConfig, ready: list[Ready]) -> list[Call]:
    """startSteps calls recording these steps as created: one per workflow (per CHUNK)."""
    by_wf: dict[str, list[int]] = {}
    for r in ready:
        by_wf.setdefault(r.workflow_id, []).append(r.index)
    calls: list[Call] = []
    for wid, indexes in by_wf.items():
        for i in range(0, len(indexes), CHUNK):
            calls.append(("startSteps", [keys.partition(workflow_tag(wid))],
                          [wid, config.task_retention_s * 1000, *indexes[i:i + CHUNK]]))
    return calls


def advance_call(keys: Keys, config: DtqConfig, task_id: str, entry: dict[str, Any], now_ms: int) -> Call:
    """advanceWorkflow's call for one outbox entry ({w, s, st, r})."""
    wid = str(entry["w"])
    return ("advanceWorkflow", [keys.partition(workflow_tag(wid))],
            [wid, int(entry["s"]), task_id, str(entry["st"]), str(entry.get("r", "")), now_ms,
             config.task_retention_s * 1000])


def ready_of(workflow_id: str, reply: Any) -> tuple[str, list[Ready]]:
    """(the workflow's status, the steps ready) from advanceWorkflow's reply; ("", []) for
    missing or stale."""
    if not isinstance(reply, list) or not reply or reply[0] != "ok":
        return "", []
    return str(reply[1]), [Ready(workflow_id, int(r[0]), json.loads(r[1]), str(r[2])) for r in reply[2]]


def fail_call(keys: Keys, config: DtqConfig, ready: Ready, reason: str, now_ms: int) -> Call:
    """advanceWorkflow's call ending a step whose task cannot be created (its queue was deleted and
    cannot be created again there) as FAILED, with reason as its error ("class: message")."""
    return advance_call(keys, config, ready.task_id, {"w": ready.workflow_id, "s": ready.index, "st": "FAILED",
                                                      "r": reason}, now_ms)
