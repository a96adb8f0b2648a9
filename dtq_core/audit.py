"""The audit trail of operator actions: an intent entry before the change, an outcome entry after.

Every destructive action (pause, resume, purge, cancel, DLQ retry/discard) runs inside
`Engine.audited(...)`, which:
1. writes the intent (actor, source, action, target, request id, selection, how many were selected)
   and marks the operation open, before anything changes;
2. records progress after each batch of a bulk action (`Operation.advance`);
3. writes the outcome (count, `finished`; or `refused`/`failed` with the error) and closes the
   operation; a refusal before anything changed withdraws the intent instead (refused requests
   are not audited).
A process killed between 1 and 3 leaves the operation open: the audit listings show it as
`unfinished`, with its selection and the progress recorded last.

Mixed into Engine; the listing is InspectMixin.audit_list.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .connection import UNAVAILABLE_ERRORS
from .errors import DtqError

if TYPE_CHECKING:
    from .admin import Actor
    from .engine import Engine

logger = logging.getLogger("dtq.audit")

OUTCOMES = ("finished", "refused", "failed", "unfinished")


@dataclass(kw_only=True, slots=True)
class Operation:
    """One audited action in progress: what the outcome entry repeats, and how far it got."""

    op_id: str
    actor: Actor
    action: str
    target: str
    started_ms: int
    selected: int | None = None
    selection: str = ""
    done: int = 0
    start_id: str = ""  # the intent entry
    engine: Any = field(default=None, repr=False)

    def advance(self, changed: int) -> None:
        """Count `changed` more and record the progress, so a cut-short action says how far it got."""
        self.done += changed
        engine: Engine = self.engine
        try:
            engine.client.hset(engine.keys.audit_open(), self.op_id, json.dumps(
                {"start": self.start_id, "at": engine.clock.now_ms(), "done": self.done}))
        except UNAVAILABLE_ERRORS:
            pass  # progress is a hint; the action itself goes on (or fails on its next call)


def _selection_json(selection: dict[str, Any] | None) -> str:
    return json.dumps(selection, separators=(",", ":"), sort_keys=True) if selection else ""


class AuditMixin:
    def _audit_fields(self: Engine, op: Operation) -> list[object]:
        actor = op.actor
        return ["actor", actor.name, "source", actor.source, "action", op.action, "target", op.target,
                "request_id", actor.request_id or "", "op_id", op.op_id, "selection", op.selection,
                "selected", "" if op.selected is None else op.selected]

    def audit_start(self: Engine, actor: Actor, action: str, target: str, *, selected: int | None = None,
                    selection: dict[str, Any] | None = None) -> Operation:
        """Write the intent entry (nothing has changed yet) and open the operation."""
        now = self.clock.now_ms()
        op = Operation(op_id=uuid.uuid4().hex[:16], actor=actor, action=action, target=target, started_ms=now,
                       selected=selected, selection=_selection_json(selection), engine=self)
        op.start_id = str(self.scripts("startAudit", keys=[self.keys.audit(), self.keys.audit_open()],
                                       args=[self.config.audit_maxlen, op.op_id, now, "ts", now, "phase", "start",
                                             "count", 0, *self._audit_fields(op)]))
        return op

    def audit_finish(self: Engine, op: Operation, *, outcome: str = "finished", error: str = "") -> str:
        """Write the outcome entry (count, outcome, when it started) and close the operation."""
        now = self.clock.now_ms()
        return str(self.scripts("finishAudit", keys=[self.keys.audit(), self.keys.audit_open()],
                                args=[self.config.audit_maxlen, op.op_id, "ts", now, "phase", "end",
                                      "count", op.done, *self._audit_fields(op), "outcome", outcome,
                                      "error", error, "started_ts", op.started_ms, "start_id", op.start_id]))

    @contextmanager
    def audited(self: Engine, actor: Actor, action: str, target: str, *, selected: int | None = None,
                selection: dict[str, Any] | None = None) -> Iterator[Operation]:
        """Run the block as one audited operation: intent first, outcome last (see the module doc).

        The block sets op.done (or calls op.advance per batch). A DtqError from the block is a
        refusal (e.g. the queue is not empty): with nothing changed yet the intent is withdrawn,
        else the outcome is `refused`. Anything else is a failure. Either way the outcome says how
        many had changed. When it cannot be written (Redis gone), the operation stays open and is
        listed as unfinished.
        """
        op = self.audit_start(actor, action, target, selected=selected, selection=selection)
        try:
            yield op
        except BaseException as exc:
            refused = isinstance(exc, DtqError)
            try:
                if refused and not op.done:
                    self.scripts("withdrawAudit", keys=[self.keys.audit(), self.keys.audit_open()],
                                 args=[op.op_id, op.start_id])
                else:
                    self.audit_finish(op, outcome="refused" if refused else "failed",
                                      error=exc.code if refused else type(exc).__name__)  # type: ignore[attr-defined]
            except Exception as second:  # noqa: BLE001 - the original error is the one to raise
                logger.warning("audit outcome not recorded op_id=%s action=%s: %s", op.op_id, action, second)
            raise
        self.audit_finish(op)

    def audit_open_count(self: Engine) -> int:
        """Operations started and not recorded as finished (running now, or cut short)."""
        return int(self.client.hlen(self.keys.audit_open()))
