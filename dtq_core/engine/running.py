"""The tasks running now, across every queue partition: what the console's /tasks/running/ page and
GET /api/v1/tasks/running show (issue 24: "a page of running tasks with their runtime and worker").

Read from each partition's running index (the zset of RUNNING task ids the claim scripts keep,
dtq_core/scripts/includes/claim.lua), then the records, in two pipelined round trips, bounded."""

from __future__ import annotations

from typing import Any

from ..clock import iso
from ..codec import progress_view
from ..replies import text_list
from .plumbing import Noun, Plumbing
from .registry import Registry

MAX_RUNNING = 500  # rows at most: a page, not an export
FIELDS = ("type", "queue", "priority", "attempt", "max_attempts", "worker_id", "started_at", "status",
          "progress_done", "progress_total", "progress_message", "progress_at", "workflow_id")


class Running(Noun):
    def __init__(self, plumbing: Plumbing, registry: Registry) -> None:
        super().__init__(plumbing)
        self.registry = registry

    def list(self, *, queue: str | None = None, limit: int = MAX_RUNNING, worker: str | None = None) -> dict[str, Any]:
        """{"results": [task, ...] longest-running first, "total": RUNNING in all, "shown": n}."""
        layouts = self.registry.layouts(fresh=True)
        tags = [tag for name, layout in sorted(layouts.items()) if queue in (None, name) for tag in layout.all_tags]
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            pipe.zcard(self.keys.running(tag))
            pipe.zrange(self.keys.running(tag), 0, limit - 1)
        replies = pipe.execute() if tags else []
        total = sum(int(n) for n in replies[0::2])
        ids = [task_id for ids in replies[1::2] for task_id in text_list(ids)]
        pipe = self.client.pipeline(transaction=False)
        for task_id in ids:
            pipe.hmget(self.keys.task(task_id), list(FIELDS))
        now = self.redis_now_ms()  # started_at is on Redis's clock (the worker's), this host's may be off
        rows: list[dict[str, Any]] = []
        for task_id, values in zip(ids, pipe.execute() if ids else [], strict=True):
            f = {name: v for name, v in zip(FIELDS, values, strict=True) if v is not None}
            if f.get("status") != "RUNNING" or (worker is not None and f.get("worker_id") != worker):
                continue  # ended between the two reads, or another worker's
            started = int(f["started_at"]) if f.get("started_at", "").isdigit() else None
            rows.append({"id": task_id, "type": f.get("type"), "queue": f.get("queue"),
                         "priority": f.get("priority") or "normal", "attempt": int(f.get("attempt") or 0),
                         "max_attempts": int(f["max_attempts"]) if f.get("max_attempts") else None,
                         "worker_id": f.get("worker_id") or None, "started_at": iso(started),
                         "runtime_s": round((now - started) / 1000, 3) if started else None,
                         "progress": progress_view(f) if f.get("progress_done") else None,
                         "workflow_id": f.get("workflow_id") or None})
        rows.sort(key=lambda r: -float(r["runtime_s"] or 0))
        return {"results": rows[:limit], "total": total, "shown": min(len(rows), limit)}
