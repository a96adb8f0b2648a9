"""Turn a task record into the status timeline the task page shows (pure, no Redis)."""

from __future__ import annotations

from typing import Any

from dtq_core.task import TERMINAL


def task_timeline(task: dict[str, Any]) -> list[dict[str, Any]]:
    """Return the task's known moments, oldest first: created, queued, each failed attempt, the end."""
    rows: list[dict[str, Any]] = []

    def add(at: str | None, label: str, kind: str, **extra: Any) -> None:
        if at:
            rows.append({"at": at, "label": label, "kind": kind, **extra})

    add(task.get("created_at"), "Created", "info")
    if task.get("due_at") and task.get("status") == "PENDING":
        add(task.get("due_at"), "Due", "pending")
    if task.get("enqueued_at") and task.get("enqueued_at") != task.get("created_at"):
        add(task.get("enqueued_at"), "Queued", "info")
    errors = task.get("errors")
    for err in errors if isinstance(errors, list) else []:
        if not isinstance(err, dict):
            continue
        add(err.get("at"), f"Attempt {err.get('attempt')} failed", "error",
            error_class=err.get("error"), message=err.get("message"), traceback=err.get("traceback"))
    status = task.get("status")
    if task.get("started_at"):
        add(task.get("started_at"), f"Attempt {task.get('attempt') or 1} started", "running")
    if status in TERMINAL and task.get("finished_at"):
        add(task.get("finished_at"), status.replace("_", " ").capitalize(), status.lower())
    # ISO-8601 UTC strings sort as times; within one millisecond, in the order things happen
    # (an attempt that fails at once shares its start's timestamp).
    order = {"info": 0, "pending": 1, "running": 2, "error": 3}
    rows.sort(key=lambda r: (r["at"], order.get(r["kind"], 4)))
    return rows
