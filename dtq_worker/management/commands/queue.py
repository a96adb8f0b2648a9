"""manage.py queue list|pause|resume|purge|delete: look at queues and stop, restart, empty or delete one
(audited)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_worker.ops import OperatorCommand, queue_name

HEADERS = ("QUEUE", "HIGH", "NORMAL", "LOW", "WAITING", "IN FLIGHT", "RETRY", "DLQ", "PAUSED")


class Command(OperatorCommand):
    help = "List queues, or pause, resume, purge or delete one."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list", "pause", "resume", "purge", "delete")
        listing = sub.add_parser("list", help="depth per priority, in flight, retry scheduled, DLQ, paused")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        for name, text in (("pause", "workers stop starting its tasks; running ones finish"),
                           ("resume", "workers start its tasks again"),
                           ("purge", "cancel every task waiting in it (not running, not scheduled)"),
                           ("delete", "remove an empty queue (nothing waiting, in flight or scheduled)")):
            sub.add_parser(name, help=text).add_argument("queue", type=queue_name)

    def do_list(self, *, json: bool, **_: Any) -> None:
        stats = get_engine().queues.stats()
        if json:
            self.emit_json(stats)
            return
        self.emit_table(HEADERS, [(q["name"], q["depth"]["high"], q["depth"]["normal"], q["depth"]["low"],
                                   q["waiting"], q["pending"], q["retry_scheduled"], q["dlq"],
                                   "yes" if q["paused"] else "no") for q in stats])

    def do_pause(self, *, queue: str, **_: Any) -> None:
        changed = get_engine().queues.pause(queue, Actor.cli())
        self.stdout.write(f"queue {queue} paused" if changed else f"queue {queue} was already paused")

    def do_resume(self, *, queue: str, **_: Any) -> None:
        changed = get_engine().queues.resume(queue, Actor.cli())
        self.stdout.write(f"queue {queue} resumed" if changed else f"queue {queue} was not paused")

    def do_delete(self, *, queue: str, **_: Any) -> None:
        get_engine().queues.delete(queue, Actor.cli())
        self.stdout.write(f"queue {queue} deleted")

    def do_purge(self, *, queue: str, **_: Any) -> None:
        self.stdout.write(f"purged {get_engine().queues.purge(queue, Actor.cli())} waiting task(s) from queue {queue}")
