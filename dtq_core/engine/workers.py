"""Workers: who is registered, their heartbeats and resources, which one leads the scheduler, and
the controls an operator has over one (quiet: stop taking tasks; stop: drain and exit), both
delivered through the worker's record and read with its next heartbeat (controlWorker-1.lua)."""

from __future__ import annotations

import builtins
from typing import Any

from ..clock import iso
from ..errors import ValidationError, WorkerNotFound
from ..replies import optional_text, scored
from .audit import Actor, Audit
from .plumbing import Noun, Plumbing
from .running import Running

CONTROLS = ("quiet", "stop")
LOST = 3  # controlWorker-1.lua: the worker is lost, not told
MAX_WORKER_ID = 200


class Workers(Noun):
    def __init__(self, plumbing: Plumbing, audit: Audit | None = None, running: Running | None = None) -> None:
        super().__init__(plumbing)
        self.audit = audit
        self.running = running

    def get(self, worker_id: str) -> dict[str, Any]:
        """One registered worker, with the tasks it runs now; WorkerNotFound when none has that id."""
        _check_id(worker_id)
        row = next((w for w in self.list() if w["id"] == worker_id), None)
        if row is None:
            raise WorkerNotFound(f"worker {worker_id!r} not found", worker_id=worker_id)
        row["running"] = self.running.list(worker=worker_id)["results"] if self.running else []
        return row

    def quiet(self, worker_id: str, actor: Actor) -> bool:
        """Tell a worker to take no more tasks (it finishes what it runs and stays up, QUIET), at
        its next heartbeat. Audited; False when it was told already."""
        return self._control(worker_id, "quiet", actor)

    def stop(self, worker_id: str, actor: Actor) -> bool:
        """Tell a worker to drain and exit, as SIGTERM does, at its next heartbeat. Audited."""
        return self._control(worker_id, "stop", actor)

    def _control(self, worker_id: str, control: str, actor: Actor) -> bool:
        _check_id(worker_id)
        if not self.client.exists(self.keys.worker(worker_id)):
            raise WorkerNotFound(f"worker {worker_id!r} not found", worker_id=worker_id)
        assert self.audit is not None
        with self.audit.operation(actor, f"worker.{control}", f"worker:{worker_id}", selected=1,
                                  selection={"worker_id": worker_id}) as op:
            now = self.redis_now_ms()  # heartbeats are on Redis's clock, this host's may be off
            told = int(self.scripts("controlWorker", keys=[self.keys.worker(worker_id)],
                                    args=[control, actor.name, now, self._lost_cutoff_ms(now)]))
            if told == 0:  # its record expired in between
                raise WorkerNotFound(f"worker {worker_id!r} not found", worker_id=worker_id)
            if told == LOST:
                raise self._lost(worker_id, control)
            op.done = 1 if told == 1 else 0
        return told == 1

    def _lost_cutoff_ms(self, now_ms: int) -> int:
        """The heartbeat time at or before which a worker is lost (list()'s state "lost"): silent
        past the visibility timeout, so peers are taking its entries whatever it last reported."""
        return now_ms - int(self.config.visibility_timeout_s * 1000)

    def _lost(self, worker_id: str, control: str) -> WorkerNotFound:
        """The refusal to tell a lost worker anything: it reads controls with its heartbeats, which
        stopped, so it would neither drain nor exit (its process is likely gone: killed, host lost)."""
        beat = self.client.zscore(self.keys.workers(), worker_id)
        silent = "" if beat is None else f" for {(self.redis_now_ms() - float(beat)) / 1000:.0f}s"
        timeout = f"{self.config.visibility_timeout_s:g}s"
        return WorkerNotFound(
            f"worker {worker_id!r} is lost: no heartbeat{silent} (past the {timeout} visibility timeout), so it "
            f"cannot be told to {control}: it would never read it. Other workers take over its tasks; check its host",
            worker_id=worker_id)

    def list(self) -> builtins.list[dict[str, Any]]:
        """Registered workers with heartbeat age, newest heartbeat first."""
        rows = scored(self.client.zrevrange(self.keys.workers(), 0, 999, withscores=True))
        pipe = self.client.pipeline(transaction=False)
        for wid, _ in rows:
            pipe.hgetall(self.keys.worker(wid))
        pipe.get(self.keys.leader())
        *details, leader = pipe.execute()
        now = self.redis_now_ms()  # heartbeats are on Redis's clock, this host's may be off
        out = []
        for (wid, beat), info in zip(rows, details, strict=True):
            age = round((now - beat) / 1000, 3)
            alive = beat > self._lost_cutoff_ms(now)
            row: dict[str, Any] = {
                "id": wid, "heartbeat_at": iso(int(beat)), "heartbeat_age_s": age, "alive": alive,
                "leader": wid == leader,
                # A worker silent past the visibility timeout is lost whatever it last reported:
                # peers are taking its entries.
                "state": info.get("state", "running") if alive else "lost",
                "hostname": None, "pid": None, "queues": None, "concurrency": None, "in_flight": None,
                "processed": None, "started_at": None, "rss_bytes": None, "cpu_seconds": None,
                "cpu_percent": None, "control": None,
            }
            if info:  # else its details expired: nothing is known but the last heartbeat
                row.update({
                    "hostname": info.get("hostname"), "pid": int(info.get("pid") or 0),
                    "queues": [q for q in info.get("queues", "").split(",") if q],
                    "concurrency": int(info.get("concurrency") or 0), "in_flight": int(info.get("in_flight") or 0),
                    "processed": int(info.get("processed") or 0), "started_at": iso(info.get("started_at")),
                    "rss_bytes": _number(info.get("rss_bytes"), int), "cpu_seconds": _number(info.get("cpu_s"), float),
                    "cpu_percent": _number(info.get("cpu_percent"), float),
                    "control": info.get("control") or None,
                })
            out.append(row)
        return out

    def leader(self) -> str | None:
        return optional_text(self.client.get(self.keys.leader()))


def _number(raw: Any, kind: type) -> Any:
    try:
        return kind(raw) if raw not in (None, "") else None
    except (TypeError, ValueError):
        return None


def _check_id(worker_id: str) -> None:
    if not isinstance(worker_id, str) or not worker_id or len(worker_id) > MAX_WORKER_ID \
            or any(c.isspace() for c in worker_id):
        raise ValidationError(f"a worker id is 1-{MAX_WORKER_ID} characters without spaces", field="worker_id")
