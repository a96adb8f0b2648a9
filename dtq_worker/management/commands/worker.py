"""manage.py worker list|show|quiet|stop: the workers, one worker's details, and telling one to
quiet (take no more tasks) or stop (drain and exit) at its next heartbeat (audited as cli:<user>)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_worker.ops import OperatorCommand

HEADERS = ("WORKER", "STATE", "HEARTBEAT", "QUEUES", "IN FLIGHT", "PROCESSED", "RSS MB", "CPU %")


class Command(OperatorCommand):
    help = "List workers, show one, or tell one to quiet or stop."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list", "show", "quiet", "stop")
        sub.add_parser("list", help="every registered worker").add_argument("--json", action="store_true")
        show = sub.add_parser("show", help="one worker: heartbeat, memory, CPU, the tasks it runs")
        show.add_argument("worker_id")
        show.add_argument("--json", action="store_true")
        sub.add_parser("quiet", help="take no more tasks; finish what runs; stay up").add_argument("worker_id")
        sub.add_parser("stop", help="drain and exit, as SIGTERM").add_argument("worker_id")

    def do_list(self, *, json: bool, **_: Any) -> None:
        rows = get_engine().workers.list()
        if json:
            self.emit_json(rows)
            return
        self.emit_table(HEADERS, [(w["id"], w["state"], f"{w['heartbeat_age_s']:.1f}s ago",
                                   ",".join(w["queues"] or []) or "all", w["in_flight"], w["processed"],
                                   _mb(w["rss_bytes"]), w["cpu_percent"]) for w in rows])

    def do_show(self, *, worker_id: str, json: bool, **_: Any) -> None:
        w = get_engine().workers.get(worker_id)
        if json:
            self.emit_json(w)
            return
        for name in ("id", "state", "control", "hostname", "pid", "queues", "concurrency", "in_flight", "processed",
                     "started_at", "heartbeat_at", "leader", "cpu_seconds", "cpu_percent"):
            self.stdout.write(f"{name + ':':<14}{w.get(name)}")
        self.stdout.write(f"{'rss:':<14}{_mb(w['rss_bytes'])} MB")
        for t in w["running"]:
            self.stdout.write(f"{'running:':<14}{t['id']} {t['type']} queue={t['queue']} for {t['runtime_s']}s")

    def do_quiet(self, *, worker_id: str, **_: Any) -> None:
        told = get_engine().workers.quiet(worker_id, Actor.cli())
        self.stdout.write(f"worker {worker_id} told to quiet: it takes no more tasks from its next heartbeat"
                          if told else f"worker {worker_id} was told so already")

    def do_stop(self, *, worker_id: str, **_: Any) -> None:
        told = get_engine().workers.stop(worker_id, Actor.cli())
        self.stdout.write(f"worker {worker_id} told to stop: it drains and exits from its next heartbeat"
                          if told else f"worker {worker_id} was told to stop already")


def _mb(value: int | None) -> str:
    return "—" if value is None else f"{value / 1_048_576:.1f}"
