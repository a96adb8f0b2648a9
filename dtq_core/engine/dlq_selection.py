"""Which dead letters a bulk action touches: ids, task ids, filters or all (exactly one way)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..errors import ValidationError
from .dlq_walk import Position
from .reads import queue_filter, type_filter

MAX_LISTED = 10_000  # ids or task ids in one bulk request
ID_EXAMPLE = "k5bxqa-1700000000000-0"  # what a dead letter's id looks like (keys.dlq_ref)


@dataclass(frozen=True, kw_only=True, slots=True)
class DlqSelection:
    """Which dead letters a bulk action touches; exactly one way of choosing is set. ids are the
    API's dead-letter ids (keys.dlq_ref: partition tag and entry id). error_class and message,
    with type, select one error group of DeadLetters.groups() exactly (the console's "Retry/Discard
    group"): None is any, "" is exactly empty. The API's body does not take them (it has no groups)."""

    ids: tuple[str, ...] = ()
    task_ids: tuple[str, ...] = ()
    queue: str | None = None
    type: str | None = None
    q: str | None = None
    error_class: str | None = None
    message: str | None = None
    all: bool = False

    @classmethod
    def from_body(cls, body: Any) -> DlqSelection:
        """Parse an API/console body; an empty body is refused so nothing is retried by accident."""
        if not isinstance(body, dict):
            raise ValidationError("body must be a JSON object")
        unknown = set(body) - {"ids", "task_ids", "queue", "type", "q", "all"}
        if unknown:
            raise ValidationError(f"unknown field(s): {', '.join(sorted(unknown))}")
        for name in ("ids", "task_ids"):
            value = body.get(name)
            if value is not None and (not isinstance(value, list) or not all(isinstance(v, str) for v in value)
                                      or len(value) > MAX_LISTED):
                raise ValidationError(f"{name} must be a list of at most {MAX_LISTED} strings", field=name)
        for name in ("queue", "type", "q"):
            if body.get(name) is not None and (not isinstance(body[name], str) or len(body[name]) > 200):
                raise ValidationError(f"{name} must be a string of at most 200 characters", field=name)
        if "all" in body and not isinstance(body["all"], bool):
            raise ValidationError("all must be true or false", field="all")
        selection = cls(ids=tuple(body.get("ids") or ()), task_ids=tuple(body.get("task_ids") or ()),
                        queue=body.get("queue") or None, type=body.get("type") or None, q=body.get("q") or None,
                        all=bool(body.get("all")))
        if not selection.chooses_something():
            raise ValidationError('say which entries: {"ids": [...]}, {"task_ids": [...]}, filters '
                                  '{"queue", "type", "q"}, or {"all": true}')
        selection.check()
        return selection

    def check(self) -> None:
        """Refuse ids that name no dead letter and selections that mix ways of choosing."""
        bad = next((i for i in self.ids if Position.from_ref(i) is None), None)
        if bad is not None:
            raise ValidationError(f"{bad[:80]!r} is not a DLQ entry id (like {ID_EXAMPLE})", field="ids")
        queue_filter(self.queue)
        type_filter(self.type)
        if any(not 0 < len(t) <= 128 for t in self.task_ids):
            raise ValidationError("task_ids must be 1-128 characters each", field="task_ids")
        if self.ids and self.task_ids:
            raise ValidationError("give ids or task_ids, not both")
        if (self.ids or self.task_ids) and (self.filtered() or self.all):
            raise ValidationError("ids/task_ids cannot be combined with filters or all")

    def filtered(self) -> bool:
        return bool(self.queue or self.type or self.q) or self.error_class is not None or self.message is not None

    def chooses_something(self) -> bool:
        return bool(self.ids or self.task_ids or self.filtered() or self.all)

    def _filters(self) -> list[tuple[str, str]]:
        """The filters set, by name (a group's error class or message may be exactly empty)."""
        return [(k, v) for k, v in (("queue", self.queue), ("type", self.type), ("q", self.q),
                                    ("error_class", self.error_class), ("message", self.message))
                if v or (k in ("error_class", "message") and v is not None)]

    def audited(self) -> dict[str, Any]:
        """The selection as the intent entry records it (long id lists cut to their first 100)."""
        if self.ids:
            return {"ids": list(self.ids[:100]), "ids_total": len(self.ids)}
        if self.task_ids:
            return {"task_ids": list(self.task_ids[:100]), "task_ids_total": len(self.task_ids)}
        return {**dict(self._filters()), **({"all": True} if self.all else {})}

    def describe(self) -> str:
        if self.ids:
            return "dlq:" + (",".join(self.ids[:5]) + ("..." if len(self.ids) > 5 else ""))
        if self.task_ids:
            return "dlq:tasks:" + (",".join(self.task_ids[:5]) + ("..." if len(self.task_ids) > 5 else ""))
        if self.all and not self.filtered():
            return "dlq:all"
        return "dlq:" + "&".join(f"{k}={v}" for k, v in self._filters())
