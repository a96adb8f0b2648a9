"""manage.py dlq list|show|retry|discard: inspect and drain the dead-letter queue (audited as cli:<user>)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import CommandError, CommandParser

from dtq_core.conf import get_engine
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection, RetryOutcome
from dtq_core.engine.reads import SCAN_BUDGET
from dtq_worker.ops import OperatorCommand, page_limit, queue_name, short, task_type

HEADERS = ("ENTRY ID", "TASK ID", "QUEUE", "TYPE", "ATTEMPT", "FAILED AT", "ERROR")


class Command(OperatorCommand):
    help = "Inspect, retry or discard dead letters."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list", "show", "retry", "discard")
        listing = sub.add_parser("list", help="dead letters, newest first")
        self._filters(listing)
        listing.add_argument("--q", dest="q", default=None, help="text in the error or payload")
        listing.add_argument("--limit", type=page_limit, default=50, help="at most this many (1-500, default 50)")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        show = sub.add_parser("show", help="one dead letter with its task")
        show.add_argument("entry_id", metavar="ID", help="a dead-letter id, as `dlq list` shows it")
        for name, verb in (("retry", "requeue with a fresh attempt budget"), ("discard", "drop for good")):
            act = sub.add_parser(name, help=f"{verb}: entry ids, or --all (narrowed by --queue/--type)")
            act.add_argument("ids", nargs="*", metavar="ID", help="dead-letter ids, as `dlq list` shows them")
            act.add_argument("--all", action="store_true", help="every dead letter matching the filters")
            self._filters(act)
            act.add_argument("--dry-run", action="store_true", help="print how many would be touched; change nothing")

    @staticmethod
    def _filters(parser: CommandParser) -> None:
        parser.add_argument("--queue", type=queue_name, default=None, help="only this queue")
        parser.add_argument("--type", type=task_type, default=None, help="only this task type")

    def do_list(self, *, queue: str | None, type: str | None, q: str | None, limit: int, json: bool,
                **_: Any) -> None:
        page = get_engine().dlq.list(queue=queue, type=type, q=q, limit=limit)
        if json:
            self.emit_json(page.items)
            return
        self.emit_table(HEADERS, [(i["entry_id"], i["task_id"], i["queue"], i["type"], i["attempt"], i["failed_at"],
                                   short(f"{i['error_class'] or ''}: {i['error'] or ''}")) for i in page.items])
        if page.next_cursor and len(page.items) >= limit:
            self.stderr.write(f"(more than {limit}; raise --limit or narrow with --queue/--type/--q)")
        elif page.next_cursor:
            # The scan budget ran out before the limit was reached: older entries were not looked at.
            self.stderr.write(f"({len(page.items)} among the newest {SCAN_BUDGET:,} dead letters examined; older "
                              "ones may match: narrow with --queue/--type/--q, or count them all with "
                              "`dlq retry --all ... --dry-run`)")

    def do_show(self, *, entry_id: str, **_: Any) -> None:
        self.emit_json(get_engine().dlq.get(entry_id))

    def do_retry(self, **options: Any) -> None:
        self._act("retry", "retried", **options)

    def do_discard(self, **options: Any) -> None:
        self._act("discard", "discarded", **options)

    def _act(self, verb: str, done: str, *, ids: list[str], all: bool, queue: str | None, type: str | None,
             dry_run: bool, **_: Any) -> None:
        if ids and (all or queue or type):
            raise CommandError("give entry ids or --all (with optional --queue/--type), not both", returncode=2)
        if not ids and not all:
            raise CommandError(f"say which dead letters to {verb}: entry ids, or --all [--queue Q] [--type T]",
                               returncode=2)
        selection = DlqSelection(ids=tuple(ids), queue=queue, type=type, all=all and not ids)
        engine = get_engine()
        if dry_run:
            self.stdout.write(f"would {verb} {engine.dlq.count_selected(selection)} dead letter(s)")
            return
        named = list(dict.fromkeys(ids))
        missing = _missing(engine, named)
        if named and len(missing) == len(named):
            raise CommandError(f"no dead letter with id {_listed(missing)}")
        if verb == "discard":
            self.stdout.write(f"{done} {engine.dlq.discard(selection, Actor.cli())} dead letter(s)")
            return
        outcome = engine.dlq.retry_outcome(selection, Actor.cli())
        self.stdout.write(f"{done} {outcome.retried} dead letter(s)")
        if named:
            self._named_not_retried(engine, [i for i in named if i not in missing], missing, outcome)
        else:
            self._selected_not_retried(outcome)

    @staticmethod
    def _named_not_retried(engine: Engine, present: list[str], missing: list[str], outcome: RetryOutcome) -> None:
        """Fail (exit 1) naming each id the operator gave that was not retried: not found, or kept."""
        if not missing and outcome.retried == len(present):
            return
        kept = _missing(engine, present, inverse=True) if outcome.retried < len(present) else []
        reasons = [f"no dead letter with id {_listed(missing)}"] if missing else []
        if kept:
            reasons.append(f"kept {_listed(kept)}: {KEPT_BECAUSE}; drop with `dtq discard-dlq {' '.join(kept[:5])}`")
        meanwhile = len(present) - outcome.retried - len(kept)
        if meanwhile > 0:  # present a moment before, gone by its turn
            reasons.append(f"{meanwhile} gone meanwhile (retried or discarded by someone else)")
        raise CommandError("not all retried: " + "; ".join(reasons))

    def _selected_not_retried(self, outcome: RetryOutcome) -> None:
        """Fail (exit 1) when dead letters the filters selected stay in the DLQ (kept)."""
        if outcome.not_found:
            self.stderr.write(f"({outcome.not_found} gone before their turn: retried or discarded by someone else)")
        if outcome.kept:
            raise CommandError(f"{outcome.kept} dead letter(s) kept: {KEPT_BECAUSE}; `dtq dlq show ID` shows "
                               "their task as null: drop them with `dtq discard-dlq ID...`")


# The one reason retryDeadLetters keeps an entry (besides a record corrupted by hand).
KEPT_BECAUSE = "the task record expired (DTQ_TASK_RETENTION_S), so there is nothing to requeue"


def _missing(engine: Engine, ids: list[str], *, inverse: bool = False) -> list[str]:
    """The ids with no dead letter now (with inverse, the ids that have one). One count for them
    all first, so the usual case (every id exists) costs one round trip, not one per id."""
    if not ids:
        return []
    count = engine.dlq.count_selected(DlqSelection(ids=tuple(ids)))
    if count == (0 if inverse else len(ids)):
        return []
    if count == (len(ids) if inverse else 0):
        return list(ids)
    return [i for i in ids if bool(engine.dlq.count_selected(DlqSelection(ids=(i,)))) == inverse]


def _listed(ids: list[str]) -> str:
    more = f" and {len(ids) - 5} more" if len(ids) > 5 else ""
    return ", ".join(ids[:5]) + more
