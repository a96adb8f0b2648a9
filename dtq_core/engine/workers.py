"""Workers: who is registered, their heartbeats, and which one leads the scheduler."""

from __future__ import annotations

import builtins
from typing import Any

from ..clock import iso
from ..replies import optional_text, scored
from .plumbing import Noun


class Workers(Noun):
    def list(self) -> builtins.list[dict[str, Any]]:
        """Registered workers with heartbeat age, newest heartbeat first."""
        rows = scored(self.client.zrevrange(self.keys.workers(), 0, 999, withscores=True))
        pipe = self.client.pipeline(transaction=False)
        for wid, _ in rows:
            pipe.hgetall(self.keys.worker(wid))
        pipe.get(self.keys.leader())
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

    def leader(self) -> str | None:
        return optional_text(self.client.get(self.keys.leader()))
