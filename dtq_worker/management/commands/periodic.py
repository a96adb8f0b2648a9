"""manage.py periodic list|show|pause|resume|trigger|delete: look at periodic tasks and pause, resume,
fire or delete one (audited as cli:<os user>)."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import CommandParser

from dtq_core.codec import dumps
from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_worker.ops import OperatorCommand, short

HEADERS = ("NAME", "SCHEDULE", "TYPE", "QUEUE", "NEXT RUN", "LAST RUN", "PAUSED", "SOURCE")
DETAILS = ("name", "description", "cron", "timezone", "every_seconds", "type", "queue", "priority", "overlap",
           "misfire", "max_attempts", "timeout_seconds", "paused", "source", "next_run_at", "created_at",
           "updated_at")
NAME_MAX = 200


def periodic_name(raw: str) -> str:
    """Refuse what cannot be a name before asking Redis (the engine checks the rest)."""
    if not raw or len(raw) > NAME_MAX or "/" in raw or not raw.isprintable():
        raise argparse.ArgumentTypeError(f"{short(raw, 80)!r} is not a periodic task name")
    return raw


def schedule_of(p: dict[str, Any]) -> str:
    if p.get("cron"):
        zone = p.get("timezone") or "UTC"
        return f"{p['cron']}" if zone == "UTC" else f"{p['cron']} ({zone})"
    every = p.get("every_seconds")
    return f"every {every:g}s" if isinstance(every, (int, float)) else f"every {every}s"


def last_run(p: dict[str, Any]) -> str:
    runs = p.get("last_runs") or []
    return f"{runs[0].get('status') or '?'} {runs[0].get('scheduled_for')}" if runs else "-"


class Command(OperatorCommand):
    help = "List periodic tasks, show one, or pause, resume, trigger or delete one."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list", "show", "pause", "resume", "trigger", "delete")
        listing = sub.add_parser("list", help="every periodic task with its next run and last run")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        show = sub.add_parser("show", help="one periodic task with its last runs")
        show.add_argument("name", type=periodic_name)
        show.add_argument("--json", action="store_true", help="print it as JSON")
        for name, text in (("pause", "fire nothing until resumed"),
                           ("resume", "fire again; its misfire setting says what happens to the ticks missed"),
                           ("trigger", "submit one run now (the next tick stays where it was)"),
                           ("delete", "remove it: it fires no more (tasks it fired are kept)")):
            sub.add_parser(name, help=text).add_argument("name", type=periodic_name)

    def do_list(self, *, json: bool, **_: Any) -> None:
        rows = get_engine().periodic.list()
        if json:
            self.emit_json(rows)
            return
        self.emit_table(HEADERS, [(p["name"], schedule_of(p), p["type"], p["queue"],
                                   "-" if p["paused"] else p.get("next_run_at") or "-", last_run(p),
                                   "yes" if p["paused"] else "no", p.get("source")) for p in rows])

    def do_show(self, *, name: str, json: bool, **_: Any) -> None:
        p = get_engine().periodic.get(name)
        if json:
            self.emit_json(p)
            return
        for field in DETAILS:
            if p.get(field) is not None:
                self.stdout.write(f"{field + ':':<18}{p[field]}")
        self.stdout.write(f"{'payload:':<18}{short(dumps(p.get('payload')), 200)}")
        for run in p.get("last_runs") or []:
            fired = f"task {run['task_id']}" if run.get("task_id") else "no task"
            kind = "" if run.get("kind", "tick") == "tick" else f" ({run['kind']})"
            self.stdout.write(f"{'run:':<18}{run.get('scheduled_for')} {run.get('status') or '?'}{kind} {fired}")

    def do_pause(self, *, name: str, **_: Any) -> None:
        get_engine().periodic.pause(name, actor=Actor.cli())
        self.stdout.write(f"periodic task {name} paused")

    def do_resume(self, *, name: str, **_: Any) -> None:
        p = get_engine().periodic.resume(name, actor=Actor.cli())
        self.stdout.write(f"periodic task {name} resumed, next run {p.get('next_run_at') or '-'}")

    def do_trigger(self, *, name: str, **_: Any) -> None:
        fired = get_engine().periodic.trigger(name, actor=Actor.cli())
        self.stdout.write(f"periodic task {name} triggered: task {fired['task_id']}")

    def do_delete(self, *, name: str, **_: Any) -> None:
        get_engine().periodic.delete(name, actor=Actor.cli())
        self.stdout.write(f"periodic task {name} deleted")
