"""manage.py queue list|pause|resume|purge|delete|limits: look at queues and stop, restart, empty or
delete one, or show and change its flow-control limits (audited)."""

from __future__ import annotations

import argparse
import re
from typing import Any

from django.core.management.base import CommandError, CommandParser

from dtq_core.conf import get_engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.limits import FIELDS, MAX_CONCURRENCY, MAX_PERIOD_S, MAX_RATE, MIN_PERIOD_S
from dtq_worker.ops import OperatorCommand, queue_name

HEADERS = ("QUEUE", "HIGH", "NORMAL", "LOW", "WAITING", "IN FLIGHT", "RETRY", "DLQ", "PAUSED")
UNSET = object()  # an option not given: the limit stays as it is
_RATE = re.compile(r"(\d{1,7})/(\d{1,9}(?:\.\d{1,3})?)?(ms|s|m|h)")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def concurrency_arg(raw: str) -> int | None:
    """N (1..100000) or none."""
    if raw == "none":
        return None
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_CONCURRENCY:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to {MAX_CONCURRENCY}, or none (got {raw!r})")
    return int(raw)


def rate_arg(raw: str) -> dict[str, Any] | None:
    """LIMIT/PERIOD with a unit (5/1s, 100/m, 10/500ms, 1000/1h), or none."""
    if raw == "none":
        return None
    match = _RATE.fullmatch(raw) if raw.isascii() else None
    if match is None:
        raise argparse.ArgumentTypeError(f"must be LIMIT/PERIOD such as 5/1s, 100/m, 10/500ms or 1000/1h, or none "
                                         f"(got {raw!r})")
    limit, amount, unit = int(match[1]), float(match[2] or 1), match[3]
    period_s = round(amount * _UNIT_S[unit], 6)
    if not 1 <= limit <= MAX_RATE:
        raise argparse.ArgumentTypeError(f"the limit must be from 1 to {MAX_RATE} (got {raw!r})")
    if not MIN_PERIOD_S <= period_s <= MAX_PERIOD_S:
        raise argparse.ArgumentTypeError(f"the period must be from 1ms to 24h (got {raw!r})")
    return {"limit": limit, "period_s": period_s}


def rate_text(rate: dict[str, Any] | None) -> str:
    return "none" if rate is None else f"{rate['limit']}/{rate['period_s']:g}s"


class Command(OperatorCommand):
    help = "List queues, or pause, resume, purge or delete one."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = self.subcommands(parser, "list", "pause", "resume", "purge", "delete", "limits")
        listing = sub.add_parser("list", help="depth per priority, in flight, retry scheduled, DLQ, paused")
        listing.add_argument("--json", action="store_true", help="print JSON instead of a table")
        for name, text in (("pause", "workers stop starting its tasks; running ones finish"),
                           ("resume", "workers start its tasks again"),
                           ("purge", "cancel every task waiting in it (not running, not scheduled)"),
                           ("delete", "remove an empty queue (nothing waiting, in flight or scheduled)")):
            sub.add_parser(name, help=text).add_argument("queue", type=queue_name)
        limits = sub.add_parser("limits", help="show a queue's limits and their usage; with options, change them "
                                               "(the others stay), or --clear them all")
        limits.add_argument("queue", type=queue_name)
        limits.add_argument("--concurrency", type=concurrency_arg, default=UNSET, metavar="N|none",
                            help="tasks of the queue running at once, across every worker")
        limits.add_argument("--rate", type=rate_arg, default=UNSET, metavar="5/1s|none",
                            help="task starts per period (units ms, s, m, h)")
        limits.add_argument("--group-concurrency", type=concurrency_arg, default=UNSET, metavar="N|none",
                            help="tasks of one group_key running at once")
        limits.add_argument("--group-rate", type=rate_arg, default=UNSET, metavar="10/60s|none",
                            help="task starts of one group_key per period")
        limits.add_argument("--clear", action="store_true", help="remove every limit of the queue")
        limits.add_argument("--json", action="store_true", help="print JSON instead of a table")

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

    def do_limits(self, *, queue: str, clear: bool, json: bool, **options: Any) -> None:
        engine = get_engine()
        given = {f: options[f] for f in FIELDS if options[f] is not UNSET}
        if clear and given:
            self.fail("--clear removes every limit: give it alone, or give only the limits to change")
        if clear:
            engine.queues.layout(queue)  # clearing a queue that does not exist must not create it
            shown = engine.limits.clear(queue, actor=Actor.cli())
        elif given:
            # Merged with what is stored: a limit not named stays (the REST PUT replaces them all).
            current = engine.limits.get(queue)
            shown = engine.limits.set(queue, {**{f: current[f] for f in FIELDS}, **given}, actor=Actor.cli(),
                                      source="api")
        else:
            engine.queues.layout(queue)  # QueueNotFound, as for the other queue commands
            shown = engine.limits.get(queue)
        if json:
            self.emit_json(shown)
            return
        if clear:
            self.stdout.write(f"limits of queue {queue} cleared")
        elif given:
            self.stdout.write(f"limits of queue {queue} set: "
                              + ", ".join(f"{f.replace('_', '-')} {self._value(f, v)}" for f, v in given.items()))
        self._show_limits(shown)

    @staticmethod
    def _value(field: str, value: Any) -> str:
        if field.endswith("rate"):
            return rate_text(value)
        return "none" if value is None else str(value)

    def _show_limits(self, shown: dict[str, Any]) -> None:
        usage = shown["usage"]
        in_use = {"concurrency": f"{usage['running']} running", "rate": f"{usage['rate_used']} started in the window",
                  "group_concurrency": f"{usage['groups_running']} group(s) running", "group_rate": ""}
        self.emit_table(("LIMIT", "VALUE", "USAGE"),
                        [(f.replace("_", "-"), self._value(f, shown[f]), in_use[f] if shown[f] is not None else "")
                         for f in FIELDS])
        self.stdout.write(f"throttled: {usage['throttled_total']} fetch(es) and claim(s) held back by a limit (a "
                          f"counter)")
        self.stdout.write(f"set by: {shown['source'] or '-'}; scope: {shown['scope']}"
                          + (f"; paused by a handler until {shown['paused_until']}" if shown["paused_until"] else ""))

    def fail(self, message: str) -> None:
        raise CommandError(f"Error: {message}", returncode=2)
