"""The schedule: delayed tasks and retries waiting for their due time, in every partition's
schedule, merged into one list soonest first."""

from __future__ import annotations

from typing import Any

from ..clock import iso
from ..errors import ValidationError
from ..keys import TASK_ID_RE, is_task_id, tag_of
from .plumbing import Noun, Plumbing
from .reads import SCORE_RE, Page, page_limit
from .registry import Registry


class Schedule(Noun):
    def __init__(self, plumbing: Plumbing, registry: Registry) -> None:
        super().__init__(plumbing)
        self.registry = registry

    def _tags(self) -> list[str]:
        return sorted({tag for layout in self.registry.layouts(fresh=True).values() for tag in layout.all_tags})

    def list(self, *, cursor: str | None = None, limit: int | None = None) -> Page:
        """Delayed tasks and due retries by due time, then task id; the cursor is
        "<due ms>-<last task id>".

        Every partition gives its next tasks after the cursor (pageSchedule, pipelined) and the
        page is the soonest of them. Tasks submitted together with one delay share a due
        millisecond, so the cursor names the last task shown and each partition resumes right
        after it in that order (a zset orders one score's members by their bytes, and so does
        the merge); a bare "<due ms>" starts after that millisecond.
        """
        limit = page_limit(limit)
        due, after = "", ""
        if cursor:
            due, _, after = cursor.partition("-")
            if not SCORE_RE.fullmatch(due) or (after and not TASK_ID_RE.fullmatch(after)):
                raise ValidationError("invalid cursor", field="cursor")
        after_tag = tag_of(after) if after else ""
        tags = self._tags()
        pipe = self.client.pipeline(transaction=False)
        for tag in tags:
            # A task id starts with its tag, so all of a partition's tasks sort on the same side of
            # the cursor's task within its millisecond: on the page when the tag sorts after.
            later = "1" if after and f"{tag}-" > f"{after_tag}-" else "0"
            self.scripts("pageSchedule", keys=[self.keys.partition(tag)],
                         args=[due, after if tag == after_tag else "", limit + 1, later], client=pipe)
        rows: list[tuple[float, str]] = []
        for flat in self.scripts.execute(pipe):
            rows.extend((float(flat[i + 1]), flat[i]) for i in range(0, len(flat), 2))
        rows.sort()
        more = len(rows) > limit
        rows = rows[:limit]
        pipe = self.client.pipeline(transaction=False)
        for _, task_id in rows:
            if is_task_id(task_id):  # anything else was written by hand: shown without details
                pipe.hmget(self.keys.task(task_id), "type", "queue", "status", "attempt", "max_attempts")
        records = iter(pipe.execute())
        now = self.redis_now_ms()  # the leader promotes by Redis's clock; this host's may be off
        items: list[dict[str, Any]] = []
        for score, task_id in rows:
            ttype, queue, status, attempt, max_attempts = next(records) if is_task_id(task_id) else [None] * 5
            items.append({"task_id": task_id, "type": ttype, "queue": queue, "status": status,
                          "attempt": int(attempt or 0), "max_attempts": int(max_attempts or 0),
                          "due_at": iso(int(score)), "due_in_s": round((score - now) / 1000, 3),
                          "kind": "retry" if status == "RETRYING" else "delayed"})
        next_cursor = f"{int(rows[-1][0])}-{rows[-1][1]}" if more and rows else None
        return Page(items=items, next_cursor=next_cursor)

    def count(self) -> int:
        """Entries in every partition's schedule: one pipelined round trip."""
        pipe = self.client.pipeline(transaction=False)
        for tag in self._tags():
            pipe.zcard(self.keys.schedule(tag))
        return sum(int(n) for n in pipe.execute())
