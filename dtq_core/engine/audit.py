"""The audit trail of operator actions: an intent entry before the change, an outcome entry after.

Every destructive action (pause, resume, purge, cancel, DLQ retry/discard) runs inside
`engine.audit.operation(...)`, which:
1. writes the intent (actor, source, action, target, request id, selection, how many were selected)
   and marks the operation open, before anything changes;
2. records progress after each batch of a bulk action (`Operation.advance`);
3. writes the outcome (count, `finished`; or `refused`/`failed` with the error) and closes the
   operation; a refusal before anything changed withdraws the intent instead (refused requests
   are not audited).
A process killed between 1 and 3 leaves the operation open: the audit listings show it as
`unfinished`, with its selection and the progress recorded last.

`Audit.list` shows the trail.
"""

from __future__ import annotations

import builtins
import getpass
import hashlib
import json
import logging
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from ..clock import iso
from ..connection import UNAVAILABLE_ERRORS
from ..errors import DtqError, ValidationError
from ..replies import entries, optional_text_list
from . import reads
from .plumbing import Noun
from .reads import Page, page_limit, stream_cursor, stream_fields

logger = logging.getLogger("dtq.audit")

OUTCOMES = ("finished", "refused", "failed", "unfinished")
AUDIT_SOURCES = ("api", "console", "cli", "worker")  # worker: a deploy's periodic schedules synced at start


@dataclass(frozen=True, kw_only=True, slots=True)
class Actor:
    """Who did it, for the audit stream: `user:<name>`, `api-key:<sha8>`, `api:anonymous`, `cli:<user>`."""

    name: str
    source: str  # api | console | cli
    request_id: str = ""

    @classmethod
    def user(cls, username: str, *, source: str, request_id: str = "") -> Actor:
        return cls(name=f"user:{username}", source=source, request_id=request_id)

    @classmethod
    def api_key(cls, key: str, *, request_id: str = "") -> Actor:
        return cls(name=f"api-key:{hashlib.sha256(key.encode()).hexdigest()[:8]}", source="api",
                   request_id=request_id)

    @classmethod
    def anonymous_api(cls, *, request_id: str = "") -> Actor:
        return cls(name="api:anonymous", source="api", request_id=request_id)

    @classmethod
    def cli(cls) -> Actor:
        # One request id per command run, so its audit entry can be quoted like an API call's.
        return cls(name=f"cli:{os_user()}", source="cli", request_id=uuid.uuid4().hex)


def os_user() -> str:
    """The account the process runs as, for `cli:<os user>`. Not getpass.getuser(): it reads
    $USER / $LOGNAME first, which anyone can set (USER=ceo dtq ...) to sign the audit trail as
    someone else. getpass is the fallback where the uid has no passwd entry (a container's
    arbitrary uid) or there is no pwd module (Windows)."""
    try:
        import pwd  # POSIX only: not importable on Windows, where getpass below answers

        return pwd.getpwuid(os.geteuid()).pw_name
    except (ImportError, KeyError, AttributeError):
        pass
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "unknown"


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
    recorder: Audit = field(repr=False)
    closed: bool = False  # its outcome is written (or its intent withdrawn): not listed as unfinished

    def advance(self, changed: int) -> None:
        """Count `changed` more and record the progress, so a cut-short action says how far it got."""
        self.done += changed
        recorder = self.recorder
        try:
            recorder.client.hset(recorder.keys.audit_open(), self.op_id, json.dumps(
                {"start": self.start_id, "at": recorder.clock.now_ms(), "done": self.done}))
        except UNAVAILABLE_ERRORS:
            pass  # progress is a hint; the action itself goes on (or fails on its next call)


CUT_SHORT = "dtq_operation"  # the attribute Audit.operation leaves on what stopped an operation


def _mark_cut_short(exc: BaseException, op: Operation) -> None:
    # The caller's one line (the CLI's "stopped after 12,000 of 200,000") needs the progress, which
    # only the operation knows; the exception is what reaches the caller.
    try:
        setattr(exc, CUT_SHORT, op)
    except AttributeError:  # an exception class with __slots__: its caller just cannot say how far
        pass


def cut_short(exc: BaseException) -> Operation | None:
    """The audited operation `exc` stopped part-way (a failure or Ctrl-C, not a refusal), or None."""
    op = getattr(exc, CUT_SHORT, None)
    return op if isinstance(op, Operation) else None


def audit_selection(selection: dict[str, Any] | None) -> str:
    """A selection as an audit entry stores it (an operation's block may name what it made)."""
    return json.dumps(selection, separators=(",", ":"), sort_keys=True) if selection else ""


def _audit_row(eid: str, f: dict[str, str], progress: str | None) -> dict[str, Any]:
    """Shape an outcome entry, an open intent (progress: its JSON in the open hash) or an entry
    written before intents existed (no phase: a finished action)."""
    try:
        selection = json.loads(f["selection"]) if f.get("selection") else None
    except ValueError:
        selection = None
    row: dict[str, Any] = {
        "id": eid, "op_id": f.get("op_id") or None, "ts": iso(f.get("ts")), "actor": f.get("actor"),
        "source": f.get("source"), "action": f.get("action"), "target": f.get("target"),
        "count": int(f.get("count") or 0), "request_id": f.get("request_id") or None,
        "outcome": f.get("outcome") or "finished", "error": f.get("error") or None,
        "started_at": iso(f.get("started_ts") or f.get("ts")),
        "selected": int(f["selected"]) if (f.get("selected") or "").isdigit() else None,
        "selection": selection, "progress_at": None,
    }
    if f.get("phase") == "start":
        try:
            state = json.loads(progress or "{}")
            row["count"], at = int(state.get("done") or 0), state.get("at")
        except (ValueError, TypeError, AttributeError):
            at = None
        row.update({"outcome": "unfinished", "progress_at": iso(at) if at else None})
    return row


class Audit(Noun):
    """The audit trail: record operator actions (intent, progress, outcome) and list them."""

    def record(self, actor: Actor, action: str, target: str, count: int) -> str:
        """Record an action that is already done, as its intent and outcome together."""
        with self.operation(actor, action, target) as op:
            op.done = count
        return op.start_id

    def _entry_fields(self, op: Operation) -> builtins.list[object]:
        actor = op.actor
        return ["actor", actor.name, "source", actor.source, "action", op.action, "target", op.target,
                "request_id", actor.request_id or "", "op_id", op.op_id, "selection", op.selection,
                "selected", "" if op.selected is None else op.selected]

    def start(self, actor: Actor, action: str, target: str, *, selected: int | None = None,
              selection: dict[str, Any] | None = None) -> Operation:
        """Write the intent entry (nothing has changed yet) and open the operation."""
        now = self.clock.now_ms()
        op = Operation(op_id=uuid.uuid4().hex[:16], actor=actor, action=action, target=target, started_ms=now,
                       selected=selected, selection=audit_selection(selection), recorder=self)
        op.start_id = str(self.scripts("startAudit", keys=[self.keys.audit(), self.keys.audit_open()],
                                       args=[self.config.audit_maxlen, op.op_id, now, "ts", now, "phase", "start",
                                             "count", 0, *self._entry_fields(op)]))
        return op

    def finish(self, op: Operation, *, outcome: str = "finished", error: str = "") -> str:
        """Write the outcome entry (count, outcome, when it started) and close the operation.

        The action's last write, so the one that waits for replicas (DTQ_REDIS_MIN_REPLICAS): they
        get the replication stream in order, so having it they have every write before it.
        """
        now = self.clock.now_ms()
        return str(self.scripts.call_direct("finishAudit", keys=[self.keys.audit(), self.keys.audit_open()],
                                            args=[self.config.audit_maxlen, op.op_id, "ts", now, "phase", "end",
                                                  "count", op.done, *self._entry_fields(op), "outcome", outcome,
                                                  "error", error, "started_ts", op.started_ms,
                                                  "start_id", op.start_id]))

    @contextmanager
    def operation(self, actor: Actor, action: str, target: str, *, selected: int | None = None,
                  selection: dict[str, Any] | None = None) -> Iterator[Operation]:
        """Run the block as one audited operation: intent first, outcome last (see the module doc).

        The block sets op.done (or calls op.advance per batch). A DtqError from the block is a
        refusal (e.g. the queue is not empty): with nothing changed yet the intent is withdrawn,
        else the outcome is `refused`. Anything else is a failure. Either way the outcome says how
        many had changed. When it cannot be written (Redis gone), the operation stays open and is
        listed as unfinished.
        """
        op = self.start(actor, action, target, selected=selected, selection=selection)
        try:
            yield op
        except BaseException as exc:
            refused = isinstance(exc, DtqError)
            if not refused:
                _mark_cut_short(exc, op)
            try:
                if refused and not op.done:
                    self.scripts("withdrawAudit", keys=[self.keys.audit(), self.keys.audit_open()],
                                 args=[op.op_id, op.start_id])
                else:
                    self.finish(op, outcome="refused" if refused else "failed",
                                error=exc.code if refused else type(exc).__name__)  # type: ignore[attr-defined]
                op.closed = True
            except Exception as second:  # noqa: BLE001 - the original error is the one to raise
                logger.warning("audit outcome not recorded op_id=%s action=%s: %s", op.op_id, action, second)
            raise
        self.finish(op)

    def open_count(self) -> int:
        """Operations started and not recorded as finished (running now, or cut short)."""
        return int(self.client.hlen(self.keys.audit_open()))

    def list(self, *, action: str | None = None, actor: str | None = None,
             source: str | None = None, cursor: str | None = None, limit: int | None = None) -> Page:
        """One row per operator action, newest first (see the module doc).

        A finished action is shown by its outcome entry (which repeats the intent's fields); its
        intent entry is skipped. An intent whose operation is still open is shown as `unfinished`:
        running now, or cut short (the process died), with the progress it recorded last.
        """
        limit = page_limit(limit)
        if source and source not in AUDIT_SOURCES:
            raise ValidationError(f"source must be one of {', '.join(AUDIT_SOURCES)}", field="source")
        upper = "+" if not stream_cursor(cursor) else "(" + str(cursor)
        items: builtins.list[dict[str, Any]] = []
        scanned, exhausted, last_seen = 0, False, None
        # One match past the page says whether an older page exists (see dlq_list).
        while len(items) <= limit and scanned < reads.SCAN_BUDGET:
            batch = entries(self.client.xrevrange(self.keys.audit(), upper, "-",
                                                  count=min(500, reads.SCAN_BUDGET - scanned)))
            if not batch:
                exhausted = True
                break
            scanned += len(batch)
            rows = [(eid, stream_fields(raw)) for eid, raw in batch]
            intents = [f["op_id"] for _, f in rows if f.get("phase") == "start" and f.get("op_id")]
            open_ops = dict(zip(intents, optional_text_list(self.client.hmget(self.keys.audit_open(), intents)),
                                strict=True)) \
                if intents else {}
            for eid, f in rows:
                upper, last_seen = "(" + eid, eid
                if (action and f.get("action") != action) or (actor and f.get("actor") != actor) \
                        or (source and f.get("source") != source):
                    continue
                progress = open_ops.get(f.get("op_id") or "")
                if f.get("phase") == "start" and progress is None:
                    continue  # finished: its outcome entry, newer, is the row
                items.append(_audit_row(eid, f, progress))
                if len(items) > limit:
                    break
        if len(items) > limit:
            return Page(items=items[:limit], next_cursor=items[limit - 1]["id"])
        next_cursor = None if exhausted or scanned < reads.SCAN_BUDGET else last_seen
        return Page(items=items, next_cursor=next_cursor)
