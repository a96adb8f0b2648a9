"""manage.py workflow list|show|cancel: look at workflows and cancel one (audited as cli:<os user>)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from django.core.management.base import CommandParser

from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.workflows import STATUSES
from dtq_worker.ops import OperatorCommand, short

HEADERS = ("WORKFLOW", "STATUS", "STEPS", "CREATED", "FINISHED")
STEP_HEADERS = ("#", "TYPE", "QUEUE", "TASK", "STATUS", "WAITS FOR", "WHY CANCELLED")
ID_MAX = 64
LIST_MAX = 200


def workflow_id(raw: str) -> str:
    """Refuse what cannot be an id before asking Redis (the engine answers not found for the rest)."""
    if not raw or len(raw) > ID_MAX or not raw.isprintable() or "/" in raw:
        raise argparse.ArgumentTypeError(f"{short(raw, 80)!r} is not a workflow id")
    return raw


def list_limit(raw: str) -> int:
    if not raw.isdigit() or not 1 <= int(raw) <= LIST_MAX:
        raise argparse.ArgumentTypeError(f"--limit must be a whole number from 1 to {LIST_MAX} "
                                         f"(got {short(raw, 20)!r})")
    return int(raw)


class Command(OperatorCommand):
    help = "List workflows, show one with its steps, or cancel one."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list", "show", "cancel")
        listing = sub.add_parser("list", help="workflows, newest first")
        listing.add_argument("--status", choices=STATUSES, help="only workflows with this status")
        listing.add_argument("--limit", type=list_limit, default=50, help=f"how many (1-{LIST_MAX}, default 50)")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        show = sub.add_parser("show", help="one workflow with every step's task and status")
        show.add_argument("id", type=workflow_id)
        show.add_argument("--json", action="store_true", help="print it as JSON")
        cancel = sub.add_parser("cancel", help="cancel a running workflow: steps not finished are CANCELLED")
        cancel.add_argument("id", type=workflow_id)
        cancel.add_argument("--yes", action="store_true",
                            help="do not ask first (asked only when stdin is a terminal; scripts are never asked)")

    def do_list(self, *, status: str | None, limit: int, json: bool, **_: Any) -> None:
        rows, _cursor = get_engine().workflows.list(status=status, limit=limit)
        if json:
            self.emit_json(rows)
            return
        self.emit_table(HEADERS, [(w["id"], w["status"], f"{w['steps_finished']}/{w['steps_total']}",
                                   w["created_at"], w["finished_at"] or "-") for w in rows])

    def do_show(self, *, id: str, json: bool, **_: Any) -> None:
        wf = get_engine().workflows.get(id)
        if json:
            self.emit_json(wf)
            return
        self.stdout.write(f"{'workflow:':<12}{wf['id']}")
        self.stdout.write(f"{'status:':<12}{wf['status']}")
        self.stdout.write(f"{'steps:':<12}{wf['steps_finished']} of {wf['steps_total']} finished "
                          f"({round(100 * wf['progress']['fraction'])}%)")
        self.stdout.write(f"{'created:':<12}{wf['created_at']}")
        if wf["finished_at"]:
            self.stdout.write(f"{'finished:':<12}{wf['finished_at']}")
        self.emit_table(STEP_HEADERS, [
            (s["index"], s["type"], s["queue"], s["task_id"], s["status"],
             ",".join(str(d) for d in s["depends_on"]) or "-", s["cancel_reason"] or "")
            for s in wf["steps"]])

    def do_cancel(self, *, id: str, yes: bool, **_: Any) -> None:
        engine = get_engine()
        if not yes and sys.stdin.isatty():
            wf = engine.workflows.get(id)  # not found / Redis down fail here, before the question
            self.stdout.write(f"cancel workflow {id} ({wf['status']}, {wf['steps_finished']} of "
                              f"{wf['steps_total']} steps finished)? [y/N] ", ending="")
            self.stdout.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                self.stdout.write("not cancelled")
                return
        wf = engine.workflows.cancel(id, actor=Actor.cli())
        self.stdout.write(f"workflow {id} cancelled ({wf['steps_total']} steps; those not finished are CANCELLED)")
