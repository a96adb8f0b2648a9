"""manage.py audit list: operator actions, newest first, with their outcome (unfinished: cut short)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandParser

from dtq_core.conf import get_engine
from dtq_core.engine.audit import AUDIT_SOURCES
from dtq_worker.ops import OperatorCommand, page_limit, short

HEADERS = ("WHEN", "ACTOR", "SOURCE", "ACTION", "TARGET", "COUNT", "OUTCOME", "REQUEST ID")


class Command(OperatorCommand):
    help = "List the audit trail of operator actions."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list")
        listing = sub.add_parser("list", help="operator actions, newest first; unfinished ones were cut short "
                                              "(or are still running)")
        listing.add_argument("--action", dest="only_action", default=None, help="only this action, e.g. dlq.retry")
        listing.add_argument("--actor", default=None, help="only this actor, e.g. user:alice")
        listing.add_argument("--source", choices=AUDIT_SOURCES, default=None,
                             help="only from api, console, cli or worker")
        listing.add_argument("--limit", type=page_limit, default=50, help="at most this many (1-500, default 50)")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")

    def do_list(self, *, only_action: str | None, actor: str | None, source: str | None, limit: int, json: bool,
                **_: Any) -> None:
        engine = get_engine()
        page = engine.audit.list(action=only_action, actor=actor, source=source, limit=limit)
        if json:
            self.emit_json(page.items)
            return
        self.emit_table(HEADERS, [(i["ts"], i["actor"], i["source"], i["action"], short(i["target"], 40),
                                   i["count"], _outcome(i), i["request_id"]) for i in page.items])
        unfinished = [i for i in page.items if i["outcome"] == "unfinished"]
        if unfinished:
            self.stderr.write(f"({len(unfinished)} unfinished: started, never recorded as done; running now or "
                              "cut short by a crash; COUNT is the progress recorded last. Re-run the action to "
                              "finish it)")
        if page.next_cursor:
            self.stderr.write(f"(more than {len(page.items)}; raise --limit or narrow with --action/--actor/--source)")


def _outcome(item: dict[str, Any]) -> str:
    if item["outcome"] == "unfinished" and item["selected"] is not None:
        return f"UNFINISHED ({item['count']} of {item['selected']})"
    if item["error"]:
        return f"{item['outcome']} ({item['error']})"
    return str(item["outcome"])
