"""Pure helpers to turn Redis replies into Python values and back."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from .clock import iso
from .encryption import reveal
from .keys import dlq_ref, is_task_id, tag_of

TIME_FIELDS = ("created_at", "updated_at", "enqueued_at", "started_at", "finished_at", "due_at", "expires_at")
INT_FIELDS = ("attempt", "max_attempts")


def dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode_result(value: Any) -> str:
    """Return a handler's result as strict JSON text, or the JSON string of its str() (repr() if
    that raises) when it has none; never raise.

    It runs after the side effects happened, so a result that cannot be stored must not fail
    the task. NaN and Infinity are refused too: json.loads reads them but the API's strict
    renderer cannot write them back out.
    """
    if value is None:
        return "null"  # most handlers return nothing: skip building an encoder (a few µs a task)
    try:
        return valid_utf8(json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False,
                                     default=str))
    except Exception:  # noqa: BLE001 - non-str keys, cycles, nesting, a __str__ that raises: anything
        pass
    for describe in (str, repr):
        try:
            return valid_utf8(json.dumps(describe(value), ensure_ascii=False))
        except Exception:  # noqa: BLE001 - user code: the next description is tried
            pass
    return json.dumps(object.__repr__(value))


def truncate_result(encoded: str, max_bytes: int) -> tuple[str, bool]:
    """Return (JSON text of at most max_bytes, whether it was cut): a cut result becomes a JSON
    string holding the longest head of `encoded` that still fits once escaped."""
    if len(encoded) * 4 <= max_bytes or len(encoded.encode()) <= max_bytes:  # at most 4 bytes a character
        return encoded, False
    head = encoded.encode()[:max_bytes].decode(errors="ignore")
    # Escaping grows the head (a quote or backslash takes 2 bytes, a control character 6) by an
    # amount that depends on where it is cut, so search for the longest prefix that fits.
    low, high = 0, len(head)
    while low < high:
        mid = (low + high + 1) // 2
        if len(json.dumps(head[:mid], ensure_ascii=False).encode()) <= max_bytes:
            low = mid
        else:
            high = mid - 1
    return json.dumps(head[:low], ensure_ascii=False), True


def is_unicode(text: str) -> bool:
    """False for a string holding an unpaired surrogate (e.g. from undecodable bytes), which
    cannot be encoded for Redis."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def valid_utf8(text: str) -> str:
    """Replace what UTF-8 cannot hold with '?': the text is written to Redis, where it must encode."""
    return text if is_unicode(text) else text.encode(errors="replace").decode()


def stored_result(fields: dict[str, str], result: str | None) -> str | None:
    """The result JSON of a task: the stored one, or "null" for a handler that returned nothing
    (completeTasks keeps that as result_null = 1 in the record, not as a result key)."""
    if result is None and fields.get("result_null") == "1":
        return "null"
    return result


COMPACTED = frozenset({"SUCCEEDED", "CANCELLED", "EXPIRED"})  # the statuses retain.lua compacts


def task_view(fields: dict[str, str], result: str | None = None, task_id: str | None = None) -> dict[str, Any]:
    """Shape a task hash for the API and console: parsed JSON, ISO times, typed numbers.

    task_id: the id the record was read by; a compact record (includes/retain.lua) does not
    hold its own id. A compact record is shown with "compact": true and payload null: the
    retention policy (DTQ_KEEP_PAYLOAD) dropped its payload, errors and submit details.
    """
    payload, sealed = reveal(_json_or_raw(fields.get("payload")), fields.get("type"))
    out: dict[str, Any] = {
        "id": fields.get("id") or task_id,
        "type": fields.get("type"),
        "queue": fields.get("queue"),
        "priority": fields.get("priority"),
        "status": fields.get("status"),
        "payload": payload,
        "timeout_s": None,  # read below, with the other numbers
        "worker_id": fields.get("worker_id") or None,
        "last_error": fields.get("last_error") or None,
        "errors": _json_or_raw(fields.get("errors")) or [],
        "result_truncated": fields.get("result_truncated") == "1",
        "cancel_requested": fields.get("cancel_requested") == "1",
        "idempotency_key": fields.get("idempotency_key") or None,
        "group_key": fields.get("group_key") or None,
        "request_id": fields.get("request_id") or None,
        "compact": fields.get("status") in COMPACTED and "payload" not in fields,
    }
    _read_field(out, fields, "timeout_s", _num)
    for name in INT_FIELDS:
        _read_field(out, fields, name, int)
    for name in TIME_FIELDS:
        _read_field(out, fields, name, iso)
    if out["compact"]:  # what retain.lua leaves out of a compact record when it is the default
        out["updated_at"] = out["updated_at"] or out["finished_at"]
        out["priority"] = out["priority"] or "normal"
        out["cancel_requested"] = out["status"] == "CANCELLED"  # only a cancel ends a task CANCELLED
    if fields.get("dlq_entry_id"):
        # The hash holds the entry id in its partition's DLQ stream; the API names a dead letter by
        # keys.dlq_ref, which carries the partition (the task id's tag) too.
        task_id = out["id"] or ""
        out["dlq_entry_id"] = (dlq_ref(tag_of(task_id), fields["dlq_entry_id"]) if is_task_id(task_id)
                               else fields["dlq_entry_id"])
    # Fired by a periodic schedule: its name and the tick (UTC ISO) it stands for; None otherwise.
    out["periodic_name"] = fields.get("periodic_name") or None
    out["scheduled_for"] = fields.get("scheduled_for") or None
    if fields.get("unique_key"):  # submitted as a unique task (docs/tasks.md, "Unique tasks")
        out["unique_key"], out["unique_mode"] = fields["unique_key"], fields.get("unique_mode") or None
    if fields.get("workflow_id"):  # a step of a workflow (docs/tasks.md, "Workflows")
        out["workflow_id"] = fields["workflow_id"]
        out["workflow_step"] = int(fields["workflow_step"]) if fields.get("workflow_step", "").isdigit() else None
    if fields.get("headers"):  # given at enqueue, or added by an enqueue middleware (docs/tasks.md)
        out["headers"] = _json_or_raw(fields["headers"])
    if fields.get("progress_done"):  # its handler reported progress (docs/tasks.md, "Progress")
        out["progress"] = progress_view(fields)
    if fields.get("handler"):  # run by another type's handler (Django tasks: django.task / django.atask)
        out["handler"] = fields["handler"]
    # What became of its dead letter: an operator's discard or retry, or the DLQ cap's trim.
    for name in ("dlq_discarded_at", "retried_from_dlq_at", "dlq_trimmed_at"):
        if fields.get(name):
            _read_field(out, fields, name, iso)
    if result is not None:
        out["result"], result_sealed = reveal(_json_or_raw(result), fields.get("type"))
        sealed = sealed or result_sealed
    if sealed:  # DTQ_ENCRYPT_TYPES: shown decrypted where a key is configured, else as "encrypted"
        out["encrypted"] = True
    return out


def _read_field(out: dict[str, Any], fields: dict[str, str], name: str, read: Callable[[str], Any]) -> None:
    """Set out[name] to the record's field read as a number or time (None when absent).

    A field that does not read (edited by hand, or written by another tool) is shown as None, its
    text kept as `<name>_corrupt` and the record marked "damaged": true, as a damaged dead letter
    is shown, so one bad field does not turn the task's page into an error (a 500, a traceback).
    """
    raw = fields.get(name, "")
    try:
        out[name] = read(raw) if raw != "" else None
    except (ValueError, OverflowError, OSError):  # not a number, or a time out of range
        out.update({name: None, f"{name}_corrupt": raw, "damaged": True})


def progress_view(fields: dict[str, str]) -> dict[str, Any]:
    """A record's progress fields as the API shows them: {"done", "total", "fraction", "message",
    "updated_at"}; fraction is done/total capped at 1 (None when the total is unknown)."""
    done = _num_or_none(fields.get("progress_done")) or 0
    total = _num_or_none(fields.get("progress_total"))
    return {"done": done, "total": total, "fraction": min(1.0, done / total) if total else None,
            "message": fields.get("progress_message") or "", "updated_at": iso(fields.get("progress_at") or None)}


def _json_or_raw(raw: str | None) -> Any:
    if raw is None or raw == "":
        return None
    try:
        return json.loads(raw, parse_constant=_refuse_constant)
    except ValueError:
        return raw
    except RecursionError:  # a result (unchecked) or a payload stored before submit limited nesting
        return raw


def _refuse_constant(name: str) -> Any:
    # Results stored before encode_result may hold NaN or Infinity: show their text, since the
    # API's strict JSON renderer would answer 500 on the float.
    raise ValueError(f"{name} is not JSON")


def _num(raw: str | None) -> float | int | None:
    if raw in (None, ""):
        return None
    value = float(raw)
    if not math.isfinite(value):  # "nan", "inf": the API's strict JSON renderer cannot write them
        raise ValueError(f"{raw!r} is not a finite number")
    return int(value) if value.is_integer() else value


def _num_or_none(raw: str | None) -> float | int | None:
    try:
        return _num(raw)
    except ValueError:  # progress is a hint: a damaged one is shown as unknown
        return None
