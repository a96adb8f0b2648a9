"""manage.py functions list|prune: the Redis function libraries of dtq versions on the server, and
removing those of other versions after an upgrade (audited as cli:<user>)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_worker.ops import OperatorCommand

HEADERS = ("LIBRARY", "VERSION", "MASTERS")


class Command(OperatorCommand):
    help = "List the Redis function libraries of dtq versions, or delete those of other versions."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list", "prune")
        listing = sub.add_parser("list", help="dtq's libraries on the server: this version's, and others'")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        prune = sub.add_parser("prune", help="delete the libraries of other dtq versions (a process of another "
                                             "version still running loads its own again at its next call)")
        prune.add_argument("--dry-run", action="store_true", help="name them, delete nothing")

    def do_list(self, *, json: bool, **_: Any) -> None:
        libraries = get_engine().functions.list()
        if json:
            self.emit_json(libraries)
            return
        self.emit_table(HEADERS, [(item["name"], "this" if item["current"] else "other", item["masters"])
                                  for item in libraries])
        if not any(item["current"] for item in libraries):
            self.stderr.write("(this version's libraries are not loaded yet: its processes load them at their first "
                              "submit, fetch or completion)")

    def do_prune(self, *, dry_run: bool, **_: Any) -> None:
        stale = get_engine().functions.prune(Actor.cli(), dry_run=dry_run)
        for name in stale:
            self.stdout.write(f"{'would delete' if dry_run else 'deleted'} {name}")
        if not stale:
            self.stdout.write("no libraries of other dtq versions")
        elif dry_run:
            self.stdout.write(f"{len(stale)} librar{'y' if len(stale) == 1 else 'ies'} of other dtq versions "
                              "(nothing deleted: --dry-run)")
