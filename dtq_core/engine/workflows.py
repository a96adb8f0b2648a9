"""Workflows (issue 23): submit a chain/group tree, read one, list them, cancel one (audited).

How a workflow runs (docs/tasks.md, "Workflows"): every step's task id is chosen at submit (each in
a partition of its own queue); the workflow's keys live in one partition's slot (the first
step's), named by the workflow id's tag. The steps with no dependency are created at submit; the
rest by advances: a step's task ending writes an outbox entry in the task's own partition, in the
script that ends it (retain_finish), and the worker that ended it (or the leader, for an entry
left behind) advances the workflow in the workflow's slot (advanceWorkflow-1.lua), creates the
steps that became ready under their pre-assigned ids (createSteps-1.lua: a repeat is a no-op),
records them as created (startSteps-1.lua) and deletes the outbox entry last. Each step is
idempotent, so a crash anywhere is repaired by running it again.
"""

from __future__ import annotations

import builtins
import json
import logging
from typing import Any

from ..clock import iso
from ..errors import (
    ErrorCode,
    UnknownTaskType,
    ValidationError,
    WorkflowNotFound,
    WorkflowQueueLimitReached,
    WorkflowTerminal,
)
from ..keys import is_workflow_id, tag_of, workflow_tag
from ..replies import text_hash
from ..submit import Submission
from ..task import TERMINAL
from ..workflow_spec import StepSpec, WorkflowSpec, leaves, parse
from ..workflow_steps import (
    CHUNK,
    Ready,
    advance_call,
    create_calls,
    created_and_closed,
    definition,
    new_workflow_id,
    ready_of,
    start_calls,
)
from .audit import Actor, Audit
from .plumbing import Noun, Plumbing
from .tasks import Tasks

logger = logging.getLogger("dtq.workflows")

STATUSES = ("RUNNING", "SUCCEEDED", "FAILED", "CANCELLED")
MAX_LIMIT = 200
# A step's state in the workflow (includes/workflow.lua) -> its status when its task record is gone.
_STATE_STATUS = {"W": "WAITING", "S": "QUEUED", "D": "SUCCEEDED", "T": "FAILED", "F": "FAILED", "C": "CANCELLED",
                 "K": "CANCELLED"}
_FINISHED_STATES = {"D", "T", "K", "F"}
_STOPPED_STATES = {"C", "K"}  # never run: cancelled, or skipped by a tolerated failure (cancel_reason says)


class Workflows(Noun):
    """Submit, read, list and cancel workflows."""

    def __init__(self, plumbing: Plumbing, audit: Audit, tasks: Tasks) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.tasks = tasks

    # -- submit -------------------------------------------------------------------------------
    def submit(self, spec: WorkflowSpec | dict[str, Any], *, request_id: str | None = None) -> str:
        """Create a workflow and its first steps; return its id. ValidationError (with the field
        path, e.g. "chain[2].type"), PayloadTooLarge, UnknownTaskType, QueueLimitReached."""
        if not isinstance(spec, WorkflowSpec):
            spec = parse(spec, self.config)
        for step in spec.steps:
            try:
                self.tasks.check_type(step.submission.handler_name)
            except UnknownTaskType as exc:
                prefix = f"{step.path}." if step.path else ""
                raise UnknownTaskType(f"{step.path}: {exc.message}" if step.path else exc.message,
                                      field=f"{prefix}type") from None
        self._check_queue_room(spec)
        placed: list[Submission] = []
        for step in spec.steps:
            s = step.submission
            if request_id is not None:
                s = Submission(type=s.type, payload_json=s.payload_json, queue=s.queue, priority=s.priority,
                               delay_s=s.delay_s, ttl_s=s.ttl_s, max_attempts=s.max_attempts, timeout_s=s.timeout_s,
                               idempotency_key=None, request_id=str(request_id)[:200], handler=s.handler,
                               group_key=s.group_key)
            placed.append(self.tasks.place(s)[0])
        wid = new_workflow_id(tag_of(placed[0].task_id))
        wkey = [self.keys.partition(workflow_tag(wid))]
        now = self.clock.now_ms()
        defs = [definition(step, placed[step.index]) for step in spec.steps]
        entries = [[step.index, defs[step.index], len(step.depends_on)] for step in spec.steps]
        root = json.dumps(spec.root, separators=(",", ":"))
        total = len(spec.steps)
        chunks = [entries[i:i + CHUNK] for i in range(0, len(entries), CHUNK)]
        calls = [("createWorkflow", wkey, [wid, now, 0, total, "", json.dumps(chunk)]) for chunk in chunks[:-1]]
        if calls:
            self._run(calls)
        (start,) = self._run([("createWorkflow", wkey, [wid, now, 1, total, root, json.dumps(chunks[-1])])])
        self.client.zadd(self.keys.workflows(), {wid: now})
        # The start, advanced here as a worker advances a step's end: should this process die
        # before the last call below, the leader re-drives the outbox entry (nothing twice).
        (reply,) = self._run([advance_call(self.keys, self.config, f"wf:{wid}", json.loads(start), now)])
        roots = ready_of(wid, reply)[1]
        made, closed = created_and_closed(roots, self._run(create_calls(
            self.keys, self.config, roots, now, self.tasks.events.flag(self.client))))
        self._started(made)
        if closed:
            # A queue deleted since its step was placed: the start stays in the outbox, and the
            # leader's re-drive registers the queue again and creates the step there
            # (worker/workflows.py), as it does for any step.
            logger.info("workflow_id=%s %d first step(s) left to the leader: their queue was deleted meanwhile",
                        wid, len(closed))
            return wid
        self._run([("settleOutbox", wkey, [f"wf:{wid}", start])])
        return wid

    def _check_queue_room(self, spec: WorkflowSpec) -> None:
        """Refuse the tree before any of its steps is placed (placing registers a step's queue)
        when its new queues do not all fit DTQ_MAX_QUEUES: a refused workflow leaves no queue
        behind. Two submits racing for the last places may still both pass here; the second is
        then refused by the registration itself, with the queues before it registered."""
        limit = self.config.max_queues
        if limit <= 0:
            return
        first: dict[str, StepSpec] = {}
        for step in spec.steps:
            first.setdefault(step.submission.queue, step)
        registry = self.tasks.registry
        known = registry.layouts()
        if all(queue in known for queue in first):
            return
        known = registry.layouts(fresh=True)
        new = [queue for queue in first if queue not in known]
        room = max(0, limit - len(known))
        if len(new) <= room:
            return
        step = first[new[room]]
        raise WorkflowQueueLimitReached(
            f"{step.path or 'workflow'}: queue {new[room]!r} does not exist and {len(known)} queues do, the limit is "
            f"{limit} (DTQ_MAX_QUEUES); this workflow needs {len(new)} new queues: use existing queues, or delete "
            "unused ones", field=f"{step.path}.queue" if step.path else "queue", queue=new[room], queues=len(known),
            limit=limit)

    def _run(self, calls: builtins.list[tuple[str, builtins.list[str], builtins.list[object]]]) -> builtins.list[Any]:
        replies = self.scripts.call_direct_many(calls) if calls else []
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies

    def _started(self, ready: builtins.list[Ready]) -> None:
        """Record steps as created; cancel their tasks when the workflow was cancelled meanwhile."""
        for reply in self._run(start_calls(self.keys, self.config, ready)):
            if isinstance(reply, list) and reply and reply[0] == "cancel":
                self._cancel_tasks([str(t) for t in reply[1]])

    def _cancel_tasks(self, task_ids: builtins.list[str]) -> int:
        """Cancel these tasks through the task cancel script (CHUNK calls per exchange); how many
        were cancelled or signalled (the rest had finished already)."""
        now = self.clock.now_ms()
        done = 0
        for i in range(0, len(task_ids), CHUNK):
            calls = [("cancelTask", [self.keys.partition(tag_of(task_id))],
                      [task_id, now, iso(now), self.config.retention_arg]) for task_id in task_ids[i:i + CHUNK]]
            done += sum(1 for reply in self._run(calls) if int(reply[0]) in (ErrorCode.OK, ErrorCode.CANCEL_SIGNALLED))
        return done

    # -- read ---------------------------------------------------------------------------------
    def _meta(self, workflow_id: str) -> dict[str, str]:
        if not is_workflow_id(workflow_id):
            raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
        meta = text_hash(self.client.hgetall(self.keys.workflow(workflow_id)))
        if not meta.get("status"):
            raise WorkflowNotFound(f"workflow {workflow_id!r} not found (it may have expired)",
                                   workflow_id=workflow_id)
        return meta

    @staticmethod
    def _summary(workflow_id: str, meta: dict[str, str]) -> dict[str, Any]:
        total = int(meta.get("steps_total") or 0)
        return {"id": workflow_id, "status": meta["status"], "created_at": iso(meta.get("created_at") or None),
                "finished_at": iso(meta.get("finished_at") or None), "steps_total": total,
                "steps_finished": int(meta.get("done") or 0)}

    def get(self, workflow_id: str, *, steps_limit: int | None = None) -> dict[str, Any]:
        """The workflow as the API shows it (docs/api.md): its status, tree, steps (each with
        its task's id and status) and aggregate progress; WorkflowNotFound.

        steps_limit: resolve only the first that many steps (the console's table), so a page of a
        20,000-step workflow reads and decodes 500 definitions, not every one (a step's definition
        holds its input and successors: in a chain of two wide groups each is thousands of
        indexes long). `steps` then holds those first ones; the others still count in
        `progress`, by their state in the workflow alone (finished or not: a running step's own
        progress is read for the resolved ones only).
        """
        meta = self._meta(workflow_id)
        total = int(meta.get("steps_total") or 0)
        resolved = total if steps_limit is None else max(0, min(total, steps_limit))
        part = self.keys.workflow_part
        pipe = self.client.pipeline(transaction=False)
        for name in ("state", "reason"):
            pipe.hgetall(part(workflow_id, name))
        if resolved:
            pipe.hmget(part(workflow_id, "def"), [str(i) for i in range(resolved)])
        states, reasons, *rest = pipe.execute()
        defs = [json.loads(raw) for raw in (rest[0] if rest else [])]
        created = [i for i in range(resolved) if states.get(str(i), "W") not in ("W",)]
        pipe = self.client.pipeline(transaction=False)
        for i in created:
            pipe.hmget(self.keys.task(defs[i]["t"]), ["status", "progress_done", "progress_total"])
        records = dict(zip(created, pipe.execute(), strict=True)) if created else {}
        steps, progress_sum = [], 0.0
        depends_on = _DependsOn()
        for i, d in enumerate(defs):
            state = states.get(str(i), "W")
            status, done, ptotal = records.get(i, (None, None, None))
            step_progress = None
            if ptotal is not None or done is not None:
                step_progress = {"done": _float(done), "total": _float(ptotal) or None}
            if state in _FINISHED_STATES or status in TERMINAL:
                progress_sum += 1.0
            elif status == "RUNNING" and step_progress and step_progress["total"]:
                progress_sum += min(1.0, float(step_progress["done"] or 0) / float(step_progress["total"]))
            steps.append({"index": i, "type": d["x"]["type"], "queue": d["x"]["queue"],
                          "priority": d["x"]["priority"], "task_id": d["t"],
                          "status": status or _STATE_STATUS.get(state, "WAITING"), "depends_on": depends_on(d["i"]),
                          "cancel_reason": reasons.get(str(i)) if state in _STOPPED_STATES else None,
                          "progress": step_progress})
        progress_sum += sum(1.0 for i in range(resolved, total) if states.get(str(i)) in _FINISHED_STATES)
        out = self._summary(workflow_id, meta)
        out["progress"] = {"done": progress_sum, "total": float(total),
                           "fraction": round(progress_sum / total, 4) if total else 0.0}
        out["root"] = json.loads(meta.get("root") or "null")
        out["steps"] = steps
        out["cancelled_at"] = iso(meta.get("cancelled_at") or None)
        # What cancel accepts (cancelWorkflow-1.lua): a RUNNING workflow, or a FAILED one not yet
        # cancelled whose other branches still have a step created or waiting.
        out["cancellable"] = meta["status"] == "RUNNING" or (
            meta["status"] == "FAILED" and not meta.get("cancelled_at")
            and any(states.get(str(i), "W") in ("S", "W") for i in range(total)))
        return out

    def list(self, *, status: str | None = None, cursor: str | None = None, limit: int = 50
             ) -> tuple[builtins.list[dict[str, Any]], str | None]:
        """Workflows, newest first: (rows without steps and tree, the next page's cursor or None).
        The cursor is opaque ("<created ms>:<id>" of the last row: stable while workflows are
        added in front). A status filter reads at most 20 slices of the index per page; a page
        that stops there says so with a cursor, even when it holds fewer rows than asked."""
        if status is not None and status not in STATUSES:
            raise ValidationError(f"status must be one of {', '.join(STATUSES)}", field="status")
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
            raise ValidationError(f"limit must be a whole number from 1 to {MAX_LIMIT}", field="limit")
        after = _parse_cursor(cursor)
        rows: builtins.list[dict[str, Any]] = []
        index = self.keys.workflows()
        scan = max(limit, 100)
        top: int | str = "+inf" if after is None else after[0]
        pos = 0
        names = ["status", "created_at", "finished_at", "steps_total", "done"]
        last: tuple[int, str] | None = None
        for _ in range(20):
            found: Any = self.client.zrevrangebyscore(index, top, "-inf", start=pos, num=scan, withscores=True)
            batch = [(str(w), int(score)) for w, score in found]
            pos += len(batch)
            exhausted = len(batch) < scan
            # Ties on the creation ms are ordered by id, descending: skip those up to the cursor's.
            batch = [(w, score) for w, score in batch if after is None or score < after[0] or w < after[1]]
            pipe = self.client.pipeline(transaction=False)
            for wid, _score in batch:
                pipe.hmget(self.keys.workflow(wid), names)
            gone = []
            for (wid, score), values in zip(batch, pipe.execute() if batch else [], strict=True):
                last = (score, wid)
                if values[0] is None:
                    gone.append(wid)
                elif status is None or values[0] == status:
                    rows.append(self._summary(wid, {k: v for k, v in zip(names, values, strict=True) if v is not None}))
                    if len(rows) == limit:
                        break
            if gone:
                self.client.zrem(index, *gone)  # expired workflows leave the index
                pos -= len(gone)
            if len(rows) == limit:
                return rows, f"{last[0]}:{last[1]}" if last else None
            if exhausted:
                return rows, None
        return rows, f"{last[0]}:{last[1]}" if last else None

    # -- cancel -------------------------------------------------------------------------------
    def cancel(self, workflow_id: str, actor: Actor) -> dict[str, Any]:
        """Cancel a workflow, audited "workflow.cancel": steps not created yet are cancelled, the
        tasks of created ones cancelled through the task cancel path. A RUNNING workflow becomes
        CANCELLED; a FAILED one whose other branches still have work stays FAILED, that work
        stopped (cancelWorkflow-1.lua). WorkflowNotFound; WorkflowTerminal when it is SUCCEEDED or
        CANCELLED, or FAILED with nothing left to stop (or stopped already)."""
        meta = self._meta(workflow_id)
        if meta["status"] not in ("RUNNING", "FAILED"):
            raise WorkflowTerminal(f"workflow {workflow_id} is already {meta['status']}",
                                   workflow_id=workflow_id, status=meta["status"])
        with self.audit.operation(actor, "workflow.cancel", f"workflow:{workflow_id}",
                                  selected=int(meta.get("steps_total") or 0),
                                  selection={"workflow_id": workflow_id}) as op:
            now = self.clock.now_ms()
            reply = self.scripts("cancelWorkflow", keys=[self.keys.partition(workflow_tag(workflow_id))],
                                 args=[workflow_id, now, self.config.task_retention_s * 1000])
            if int(reply[0]) == -1:
                raise WorkflowNotFound(f"workflow {workflow_id!r} not found", workflow_id=workflow_id)
            if int(reply[0]) == -2:
                left = " with nothing left to cancel" if reply[1] == "FAILED" else ""
                raise WorkflowTerminal(f"workflow {workflow_id} is already {reply[1]}{left}", workflow_id=workflow_id,
                                       status=str(reply[1]))
            op.done = self._cancel_tasks([str(t) for t in reply[1]]) or 1
        return self.get(workflow_id)


class _DependsOn:
    """leaves() of step inputs, worked out once per distinct input: every member of a group reads
    the same input, so a group of 4,500 after another would otherwise walk 20 million indexes."""

    def __init__(self) -> None:
        self._seen: dict[object, list[int]] = {}

    def __call__(self, expr: Any) -> list[int]:
        if not isinstance(expr, list):
            return leaves(expr)
        key: object = tuple(expr)  # a flat list (a group's output) is its own key
        try:
            found = self._seen.get(key)
        except TypeError:  # a nested one (a group of groups) is not hashable: keyed by its JSON text
            key = json.dumps(expr)
            found = self._seen.get(key)
        if found is None:
            found = self._seen[key] = leaves(expr)
        return found


def _float(value: str | None) -> float:
    try:
        return float(value) if value not in (None, "") else 0.0
    except ValueError:
        return 0.0


def _parse_cursor(cursor: str | None) -> tuple[int, str] | None:
    if not cursor:
        return None
    score, _, wid = str(cursor).partition(":")
    if not score.isdigit() or not is_workflow_id(wid):
        raise ValidationError("cursor is not one this API returned", field="cursor")
    return int(score), wid
