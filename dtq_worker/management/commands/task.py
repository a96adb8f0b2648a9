"""manage.py task show|cancel: one task's record, or cancel it (audited as cli:<user>)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from dtq_core.codec import dumps
from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_worker.ops import OperatorCommand, short

SUMMARY = ("id", "type", "queue", "priority", "status", "attempt", "max_attempts", "created_at", "started_at",
           "finished_at", "due_at", "expires_at", "worker_id", "last_error", "cancel_requested", "dlq_entry_id")


class Command(OperatorCommand):
    help = "Show or cancel one task."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "show", "cancel")
        show = sub.add_parser("show", help="the task record, with payload, errors and result")
        show.add_argument("task_id")
        show.add_argument("--json", action="store_true", help="print the record as JSON")
        sub.add_parser("cancel", help="cancel it (at once when waiting, via its worker when running)"
                       ).add_argument("task_id")

    def do_show(self, *, task_id: str, json: bool, **_: Any) -> None:
        task = get_engine().tasks.get(task_id)
        if json:
            self.emit_json(task)
            return
        for name in SUMMARY:
            if task.get(name) is not None:
                self.stdout.write(f"{name + ':':<18}{task[name]}")
        damaged = [f"{name.removesuffix('_corrupt')}={raw!r}" for name, raw in task.items()
                   if name.endswith("_corrupt")]
        if damaged:  # shown as null above (codec.task_view): say what the record really holds
            self.stdout.write(f"{'damaged:':<18}{', '.join(damaged)} (not readable; edited by hand or another tool?)")
        payload = "(not kept: a compact finished record, DTQ_KEEP_PAYLOAD)" if task.get("compact") \
            else short(dumps(task["payload"]), 200)
        self.stdout.write(f"{'payload:':<18}{payload}")
        if "result" in task:
            self.stdout.write(f"{'result:':<18}{short(dumps(task['result']), 200)}")
        for err in task.get("errors") or []:
            if isinstance(err, dict):
                self.stdout.write(f"{'error:':<18}attempt {err.get('attempt')} {err.get('error')}: "
                                  f"{short(err.get('message'), 100)}")

    def do_cancel(self, *, task_id: str, **_: Any) -> None:
        result = get_engine().tasks.cancel(task_id, Actor.cli())
        self.stdout.write(f"task {task_id} cancelled" if result.cancelled
                          else f"task {task_id} is running: cancel requested, its worker will stop it")
