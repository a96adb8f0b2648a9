"""The schedule: delayed tasks and retries waiting for their due time."""

from __future__ import annotations

from ..clock import iso
from ..errors import ValidationError
from .plumbing import Noun
from .reads import SCORE_RE, TASK_ID_RE, Page, page_limit


class Schedule(Noun):
    def list(self, *, cursor: str | None = None, limit: int | None = None) -> Page:
        """Delayed tasks and due retries by due time; the cursor is "<due ms>-<last task id>".

        Tasks submitted together with one delay share a due millisecond, so the cursor names the
        last task shown and the next page starts right after it (pageSchedule); a bare
        "<due ms>" (links made before) starts after that millisecond.
        """
        limit = page_limit(limit)
        due, after = "", ""
        if cursor:
            due, _, after = cursor.partition("-")
            if not SCORE_RE.fullmatch(due) or (after and not TASK_ID_RE.fullmatch(after)):
                raise ValidationError("invalid cursor", field="cursor")
        flat = self.scripts("pageSchedule", keys=[self.keys.schedule()], args=[due, after, limit + 1])
        rows = [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)]
        more = len(rows) > limit
        rows = rows[:limit]
        pipe = self.client.pipeline(transaction=False)
        for task_id, _ in rows:
            pipe.hmget(self.keys.task(task_id), "type", "queue", "status", "attempt", "max_attempts")
        now = self.clock.now_ms()
        items = []
        for (task_id, score), (ttype, queue, status, attempt, max_attempts) in zip(rows, pipe.execute(),
                                                                                    strict=True):
            items.append({"task_id": task_id, "type": ttype, "queue": queue, "status": status,
                          "attempt": int(attempt or 0), "max_attempts": int(max_attempts or 0),
                          "due_at": iso(int(score)), "due_in_s": round((score - now) / 1000, 3),
                          "kind": "retry" if status == "RETRYING" else "delayed"})
        next_cursor = f"{int(rows[-1][1])}-{rows[-1][0]}" if more and rows else None
        return Page(items=items, next_cursor=next_cursor)

    def count(self) -> int:
        return int(self.client.zcard(self.keys.schedule()))
