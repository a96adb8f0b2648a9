"""Read models for the API, CLI, console and metrics: bounded, pipelined reads.

Mixed into Engine; every method costs a fixed number of round trips however large the data.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from . import codec
from .clock import iso
from .errors import DeadLetterNotFound, QueueNotFound, ValidationError
from .keys import PRIORITIES, Keys
from .task import TASK_TYPE_RE, valid_queue_name

if TYPE_CHECKING:
    from .engine import Engine

MAX_PAGE = 500
SCAN_BUDGET = 5000  # entries examined per filtered page before returning a cursor
SCAN_CALL_BYTES = 1 << 20  # text one scan script call looks at or returns: it holds Redis meanwhile
STREAM_ID_RE = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
MAX_ID_PART = 2**64 - 1
_SCORE_RE = re.compile(r"[0-9]{1,20}")  # str.isdigit() accepts "²", which Redis rejects
_TASK_ID_RE = re.compile(r"[0-9A-Za-z_.-]{1,128}")  # ids dtq makes are 32 hex digits


@dataclass(frozen=True, kw_only=True, slots=True)
class Page:
    items: list[dict[str, Any]]
    next_cursor: str | None


@dataclass(frozen=True, kw_only=True, slots=True)
class _Walk:
    matches: list[tuple[str, dict[str, str]]]  # (entry id, fields), newest first
    exhausted: bool  # it passed the oldest entry
    last_seen: str | None  # where to go on from


def _fields(flat: list[Any] | dict[str, Any]) -> dict[str, str]:
    if isinstance(flat, dict):
        return flat
    return dict(zip(flat[::2], flat[1::2], strict=False))


def valid_stream_id(value: object) -> bool:
    """Say whether value is a full stream entry id ("<ms>-<seq>", each part a 64-bit unsigned
    number), the only form Redis accepts here."""
    if not isinstance(value, str) or STREAM_ID_RE.fullmatch(value) is None:
        return False
    return all(part <= MAX_ID_PART for part in _id_parts(value))


def _stream_cursor(cursor: str | None) -> str | None:
    # An unparsable id would make XRANGE fail with a ResponseError (a 500): refuse it as bad input.
    # So would "(0-0" as the exclusive end of a walk down; no page ever ends there.
    if cursor and (not valid_stream_id(cursor) or _id_parts(cursor) == (0, 0)):
        raise ValidationError("invalid cursor", field="cursor")
    return cursor or None


def _id_parts(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq)


def queue_filter(queue: str | None) -> str | None:
    """A queue filter names a possible queue: a typo is a 400, not an empty page."""
    if queue and not valid_queue_name(queue):
        raise ValidationError("queue must match [a-z0-9][a-z0-9_-]{0,63} (and not be dlq or audit)", field="queue")
    return queue or None


def type_filter(type: str | None) -> str | None:
    """A task-type filter names a possible type (what submit accepts)."""
    if type and not TASK_TYPE_RE.fullmatch(type):
        raise ValidationError("type must be 1-200 characters of letters, digits and _ . : -", field="type")
    return type or None


AUDIT_SOURCES = ("api", "console", "cli")


def _limit(limit: int | None, default: int = 50) -> int:
    if limit is None:
        return default
    if not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValidationError(f"limit must be between 1 and {MAX_PAGE}", field="limit")
    return limit


def _pause_details(raw: str | None) -> dict[str, Any]:
    """Who paused a paused queue, and when (None for a pause from before dtq recorded it)."""
    try:
        info = json.loads(raw) if raw else {}
        return {"paused_by": str(info["by"]), "paused_at": iso(int(info["at"]))}
    except (ValueError, KeyError, TypeError):
        return {"paused_by": None, "paused_at": None}


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


class InspectMixin:
    # -- queues -------------------------------------------------------------------------------
    def queue_names(self: Engine) -> list[str]:
        return sorted(self.client.smembers(self.keys.queues()))

    def queue_stats(self: Engine, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Depth per priority, in flight, retry scheduled, DLQ count, paused: one round trip."""
        k = self.keys
        if names is None:
            names = self.queue_names()
        pipe = self.client.pipeline(transaction=False)
        pipe.smembers(k.paused())
        pipe.hgetall(k.schedule_counts())
        pipe.hgetall(k.dlq_counts())
        pipe.hgetall(k.throughput(self.clock.now_ms() // 60000 - 1))
        pipe.hgetall(k.paused_info())
        for name in names:
            for stream in k.streams(name):
                pipe.xlen(stream)
                pipe.xpending(stream, Keys.GROUP)
        replies = pipe.execute(raise_on_error=False)
        paused, scheduled, dead, done_last_minute, paused_info = replies[:5]
        out = []
        for i, name in enumerate(names):
            depth: dict[str, int] = {}
            in_flight = 0
            for j, priority in enumerate(PRIORITIES):
                base = 5 + i * 6 + j * 2
                length = replies[base] if isinstance(replies[base], int) else 0
                pending = replies[base + 1]
                pending_count = int(pending["pending"]) if isinstance(pending, dict) else 0
                in_flight += pending_count
                depth[priority] = max(0, length - pending_count)
            out.append({
                "name": name,
                "depth": depth,
                "waiting": sum(depth.values()),
                "pending": in_flight,
                "retry_scheduled": max(0, int(scheduled.get(name, 0))),
                "dlq": max(0, int(dead.get(name, 0))),
                "paused": name in paused,
                **_pause_details(paused_info.get(name) if name in paused else None),
                "finished_last_minute": int(done_last_minute.get(name, 0)),
            })
        return out

    def queue_detail(self: Engine, name: str) -> dict[str, Any]:
        if not valid_queue_name(name) or not self.client.sismember(self.keys.queues(), name):
            raise QueueNotFound(f"queue {name!r} not found", queue=name)
        return self.queue_stats([name])[0]

    def waiting_tasks(self: Engine, name: str, *, after: str | None = None, limit: int | None = None
                      ) -> Page:
        """Entries of a queue's streams in serving order (high first), paged by stream id.

        The cursor is "<priority>:<entry id>"; entries in flight are included, with their status.
        """
        limit = _limit(limit)
        self.queue_detail(name)
        start_priority, start_id = "high", "-"
        if after:
            start_priority, _, start_id = after.partition(":")
            # "(" + the largest id would make XRANGE fail; no page ever ends there.
            if start_priority not in PRIORITIES or not valid_stream_id(start_id) \
                    or _id_parts(start_id) == (MAX_ID_PART, MAX_ID_PART):
                raise ValidationError("invalid cursor", field="cursor")
            start_id = "(" + start_id
        rows: list[tuple[str, str, str]] = []
        for priority in PRIORITIES[PRIORITIES.index(start_priority):]:
            want = limit + 1 - len(rows)
            if want <= 0:
                break
            entries = self.client.xrange(self.keys.stream(name, priority), start_id, "+", count=want)
            rows.extend((priority, eid, _fields(f).get("task_id", "")) for eid, f in entries)
            start_id = "-"
        more = len(rows) > limit
        rows = rows[:limit]
        pipe = self.client.pipeline(transaction=False)
        for _, _, task_id in rows:
            pipe.hmget(self.keys.task(task_id), "type", "status", "attempt", "created_at", "payload")
        items = []
        for (priority, eid, task_id), (ttype, status, attempt, created, payload) in zip(rows, pipe.execute(),
                                                                                          strict=True):
            items.append({"entry_id": eid, "priority": priority, "task_id": task_id, "type": ttype,
                          "status": status or "MISSING", "attempt": int(attempt or 0),
                          "created_at": iso(created), "payload_preview": (payload or "")[:200]})
        next_cursor = f"{rows[-1][0]}:{rows[-1][1]}" if more and rows else None
        return Page(items=items, next_cursor=next_cursor)

    # -- tasks --------------------------------------------------------------------------------
    def list_tasks(self: Engine, *, queue: str | None = None, status: str | None = None,
                   type: str | None = None, cursor: str | None = None, limit: int | None = None) -> Page:
        """Recent tasks, newest first, filtered; the cursor is "<created ms>-<tasks of that ms seen>".

        Many tasks share a millisecond (a batch submit), so the cursor resumes by offset within
        that score instead of skipping the rest of it. Scores only grow (creation time), so the
        members of a past millisecond do not change between pages.
        """
        limit = _limit(limit)
        queue, type = queue_filter(queue), type_filter(type)
        upper, seen_at_score, last_score = "+inf", 0, None
        if cursor:
            score, _, seen = cursor.partition("-")
            if not _SCORE_RE.fullmatch(score) or not seen.isascii() or not seen.isdigit() or len(seen) > 9:
                raise ValidationError("invalid cursor", field="cursor")
            upper, seen_at_score, last_score = score, int(seen), int(score)
        offset = seen_at_score
        filtering = bool(queue or status or type)
        # One match past the page says whether an older page exists (see dlq_list).
        target = limit + 1
        items: list[dict[str, Any]] = []
        positions: list[str] = []  # the cursor that resumes just behind each item
        scanned, exhausted = 0, False
        # The filters run in Redis (scanRecentTasks), so only matching records travel.
        while len(items) < target and scanned < SCAN_BUDGET and not exhausted:
            want = min(500, SCAN_BUDGET - scanned) if filtering else min(500, target - len(items))
            examined, read, score_passed, seen_passed, records, after = self.scripts(
                "scanRecentTasks", keys=[self.keys.recent(), self.keys.task_prefix()],
                args=[upper, offset, want, queue or "", status or "", type or "",
                      target - len(items), "" if last_score is None else last_score, seen_at_score,
                      SCAN_CALL_BYTES])
            scanned += int(examined)
            offset += int(examined)
            if score_passed:
                last_score, seen_at_score = int(float(score_passed)), int(seen_passed)
            items.extend(codec.task_view(_fields(record)) for record in records)
            positions.extend(f"{int(float(score))}-{seen}" for score, seen in after)
            exhausted = int(examined) == int(read) < want and len(items) < target  # it passed the oldest
        if len(items) > limit:
            return Page(items=items[:limit], next_cursor=positions[limit - 1])
        more = not exhausted and last_score is not None
        return Page(items=items, next_cursor=f"{last_score}-{seen_at_score}" if more else None)

    # -- dead letters -------------------------------------------------------------------------
    def dlq_list(self: Engine, *, queue: str | None = None, type: str | None = None, q: str | None = None,
                 cursor: str | None = None, limit: int | None = None) -> Page:
        """Dead letters newest first, filtered by queue, type and text in error or payload."""
        limit = _limit(limit)
        queue, type = queue_filter(queue), type_filter(type)
        upper = "+" if not _stream_cursor(cursor) else "(" + str(cursor)
        # One match past the page says whether an older page exists, so a full page that ends on
        # the last match offers no cursor to an empty one. Without it (budget spent first), the
        # cursor goes on from the last entry examined.
        walk = self._walk_dead_letters(upper, queue=queue, type=type, q=q, budget=SCAN_BUDGET, limit=limit + 1)
        matches = walk.matches[:limit]
        if len(walk.matches) > limit:
            next_cursor: str | None = matches[-1][0]
        else:
            next_cursor = None if walk.exhausted else walk.last_seen
        return Page(items=[self._dlq_item(eid, f) for eid, f in matches], next_cursor=next_cursor)

    def _walk_dead_letters(self: Engine, upper: str, *, queue: str | None, type: str | None, q: str | None,
                           budget: int, limit: int) -> _Walk:
        """Walk the DLQ down from `upper` until `limit` matches or `budget` entries examined.

        The filters run in Redis (scanDeadLetters), 500 entries a call, so a search that looks at
        thousands of entries ships only the matches. A needle with non-ASCII characters is matched
        here instead (Python's lower(), which Lua's cannot match), on the payloads the script
        returns with the entries that pass the other filters.
        """
        matches: list[tuple[str, dict[str, str]]] = []
        scanned = 0
        exhausted = False
        last_seen: str | None = None
        needle = q.lower() if q else ""
        in_redis = needle.isascii()
        while len(matches) < limit and scanned < budget and not exhausted:
            count = min(500, budget - scanned)
            examined, last, found, read = self.scripts(
                "scanDeadLetters", keys=[self.keys.dlq(), self.keys.task_prefix()],
                # Matched here, the script's candidates can fall short: it must not stop at `limit`.
                args=[upper, count, queue or "", type or "", needle if in_redis else "", 0 if in_redis else 1,
                      limit - len(matches) if in_redis else count, SCAN_CALL_BYTES])
            scanned += int(examined)
            if last:
                upper, last_seen = "(" + last, last
            for eid, raw, payload in found:
                f = _fields(raw)
                if not in_redis and needle not in (f.get("error", "") + " " + f.get("error_class", "")).lower() \
                        and needle not in payload.lower():
                    continue
                matches.append((eid, f))
                if len(matches) == limit:
                    last_seen = eid
                    break
            # It passed the oldest entry (the script stops early once it has as many as asked for).
            exhausted = int(examined) == int(read) < count and len(matches) < limit
        return _Walk(matches=matches, exhausted=exhausted, last_seen=last_seen)

    def dlq_entry(self: Engine, entry_id: str) -> dict[str, Any]:
        if not valid_stream_id(entry_id):  # an unparsable id is a 404, not a 500
            raise DeadLetterNotFound(f"dead letter {entry_id!r} not found", entry_id=entry_id)
        entries = self.client.xrange(self.keys.dlq(), entry_id, entry_id)
        if not entries:
            raise DeadLetterNotFound(f"dead letter {entry_id!r} not found", entry_id=entry_id)
        item = self._dlq_item(entries[0][0], _fields(entries[0][1]))
        try:
            item["task"] = self.get_task(item["task_id"])
        except LookupError:
            item["task"] = None
        return item

    def dlq_count(self: Engine) -> int:
        return int(self.client.xlen(self.keys.dlq()))

    def dlq_trimmed(self: Engine) -> int:
        """Dead letters the DLQ cap (DTQ_DLQ_MAXLEN) has evicted, ever (dtq_dlq_trimmed_total)."""
        return int(self.client.hget(self.keys.stats_counters(), "dlq_trimmed") or 0)

    @staticmethod
    def _dlq_item(eid: str, f: dict[str, str]) -> dict[str, Any]:
        return {"entry_id": eid, "task_id": f.get("task_id"), "queue": f.get("queue"), "type": f.get("type"),
                "attempt": int(f.get("attempt") or 0), "error_class": f.get("error_class"),
                "error": f.get("error"), "failed_at": iso(f.get("failed_at"))}

    # -- schedule, workers, audit ---------------------------------------------------------------
    def schedule_list(self: Engine, *, cursor: str | None = None, limit: int | None = None) -> Page:
        """Delayed tasks and due retries by due time; the cursor is "<due ms>-<last task id>".

        Tasks submitted together with one delay share a due millisecond, so the cursor names the
        last task shown and the next page starts right after it (pageSchedule); a bare
        "<due ms>" (links made before) starts after that millisecond.
        """
        limit = _limit(limit)
        due, after = "", ""
        if cursor:
            due, _, after = cursor.partition("-")
            if not _SCORE_RE.fullmatch(due) or (after and not _TASK_ID_RE.fullmatch(after)):
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

    def scheduled_count(self: Engine) -> int:
        return int(self.client.zcard(self.keys.schedule()))

    def workers(self: Engine) -> list[dict[str, Any]]:
        """Registered workers with heartbeat age, newest heartbeat first."""
        rows = self.client.zrevrange(self.keys.workers(), 0, 999, withscores=True)
        pipe = self.client.pipeline(transaction=False)
        for wid, _ in rows:
            pipe.hgetall(self.keys.worker(wid))
        pipe.get(self.keys.scheduler_lock())
        *details, leader = pipe.execute()
        now = self.clock.now_ms()
        out = []
        for (wid, beat), info in zip(rows, details, strict=True):
            age = round((now - beat) / 1000, 3)
            alive = age < self.config.visibility_timeout_s
            row: dict[str, Any] = {
                "id": wid, "heartbeat_at": iso(int(beat)), "heartbeat_age_s": age, "alive": alive,
                "leader": wid == leader,
                # A worker silent past the visibility timeout is lost whatever it last reported:
                # peers are taking its entries.
                "state": info.get("state", "running") if alive else "lost",
                "hostname": None, "pid": None, "queues": None, "concurrency": None, "in_flight": None,
                "processed": None, "started_at": None,
            }
            if info:  # else its details expired: nothing is known but the last heartbeat
                row.update({
                    "hostname": info.get("hostname"), "pid": int(info.get("pid") or 0),
                    "queues": [q for q in info.get("queues", "").split(",") if q],
                    "concurrency": int(info.get("concurrency") or 0), "in_flight": int(info.get("in_flight") or 0),
                    "processed": int(info.get("processed") or 0), "started_at": iso(info.get("started_at")),
                })
            out.append(row)
        return out

    def scheduler_leader(self: Engine) -> str | None:
        return self.client.get(self.keys.scheduler_lock())

    def audit_list(self: Engine, *, action: str | None = None, actor: str | None = None,
                   source: str | None = None, cursor: str | None = None, limit: int | None = None) -> Page:
        """One row per operator action, newest first (see audit.py).

        A finished action is shown by its outcome entry (which repeats the intent's fields); its
        intent entry is skipped. An intent whose operation is still open is shown as `unfinished`:
        running now, or cut short (the process died), with the progress it recorded last.
        """
        limit = _limit(limit)
        if source and source not in AUDIT_SOURCES:
            raise ValidationError(f"source must be one of {', '.join(AUDIT_SOURCES)}", field="source")
        upper = "+" if not _stream_cursor(cursor) else "(" + str(cursor)
        items: list[dict[str, Any]] = []
        scanned, exhausted, last_seen = 0, False, None
        # One match past the page says whether an older page exists (see dlq_list).
        while len(items) <= limit and scanned < SCAN_BUDGET:
            batch = self.client.xrevrange(self.keys.audit(), upper, "-", count=min(500, SCAN_BUDGET - scanned))
            if not batch:
                exhausted = True
                break
            scanned += len(batch)
            rows = [(eid, _fields(raw)) for eid, raw in batch]
            intents = [f["op_id"] for _, f in rows if f.get("phase") == "start" and f.get("op_id")]
            open_ops = dict(zip(intents, self.client.hmget(self.keys.audit_open(), intents), strict=True)) \
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
        next_cursor = None if exhausted or scanned < SCAN_BUDGET else last_seen
        return Page(items=items, next_cursor=next_cursor)

    # -- console helpers (added for the operations console) -----------------------------------
    def dlq_groups(self: Engine, *, queue: str | None = None, type: str | None = None,
                   window: int = 1000) -> dict[str, Any]:
        """Group the newest `window` dead letters by type, error class and message: one XREVRANGE."""
        window = max(1, min(int(window), SCAN_BUDGET))
        batch = self.client.xrevrange(self.keys.dlq(), "+", "-", count=window)
        groups: dict[tuple[str, str, str], dict[str, Any]] = {}
        for eid, raw in batch:
            f = _fields(raw)
            if (queue and f.get("queue") != queue) or (type and f.get("type") != type):
                continue
            # The first line, bounded, so tracebacks and long messages still group together.
            message = (f.get("error") or "").strip().splitlines()[0][:200] if f.get("error") else ""
            key = (f.get("type") or "", f.get("error_class") or "", message)
            group = groups.get(key)
            if group is None:
                group = groups[key] = {"type": key[0], "error_class": key[1], "message": message, "count": 0,
                                       "queues": set(), "latest_entry_id": eid,
                                       "latest_failed_at": iso(f.get("failed_at"))}
            group["count"] += 1
            group["queues"].add(f.get("queue") or "")
        items = sorted(groups.values(), key=lambda g: (-g["count"], g["type"], g["message"]))
        for group in items:
            group["queues"] = sorted(group["queues"])
        return {"groups": items, "scanned": len(batch), "window": window, "partial": len(batch) == window}

    def dlq_match_count(self: Engine, *, queue: str | None = None, type: str | None = None,
                        q: str | None = None, budget: int = SCAN_BUDGET) -> dict[str, Any]:
        """How many dead letters a filter matches (the preview before a bulk action), in bounded time.

        Queue-only and unfiltered counts are exact from the counts hash. Type and text filters count
        within the newest `budget` entries; `exact` is False when older entries were not examined
        (the action itself still matches every entry).
        """
        queue, type = queue_filter(queue), type_filter(type)
        if not (type or q):
            if queue:
                return {"count": max(0, int(self.client.hget(self.keys.dlq_counts(), queue) or 0)), "exact": True}
            return {"count": self.dlq_count(), "exact": True}
        walk = self._walk_dead_letters("+", queue=queue, type=type, q=q, budget=budget, limit=budget)
        more = not walk.exhausted and bool(self.client.xrevrange(
            self.keys.dlq(), "(" + walk.last_seen if walk.last_seen else "+", "-", count=1))
        count = len(walk.matches)
        return {"count": count, "exact": not more}
