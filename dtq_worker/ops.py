"""Shared plumbing of the operator commands (dlq, queue, task, periodic): parsing, errors, output.

Every failure leaves as one line and a non-zero exit: argparse errors (exit 2) without the
usage block, dtq errors and an unreachable Redis as CommandError (exit 1), saying how far an
audited bulk action got when one was cut short.
"""

from __future__ import annotations

import argparse
import json
import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from dtq_core.codec import is_unicode
from dtq_core.conf import get_config
from dtq_core.engine.audit import cut_short
from dtq_core.engine.reads import MAX_PAGE
from dtq_core.errors import DtqError
from dtq_core.redis_errors import one_line, translate
from dtq_core.redis_url import redacted as redacted_url
from dtq_core.task import TASK_TYPE_RE, valid_queue_name


class OneLineParser(CommandParser):
    """A CommandParser whose command-line errors are one line, not usage plus message."""

    def error(self, message: str) -> NoReturn:
        if self.called_from_command_line:
            self.exit(2, f"{self.prog}: error: {message}\n")
        raise CommandError(f"Error: {message}")


def redacted(url: str) -> str:
    """Drop the password from a Redis URL before printing it (sentinel and cluster URLs too)."""
    return redacted_url(url)


def implicit_redis() -> str | None:
    """"reading <url> (from <where>)" when nobody named the Redis: DTQ_REDIS_URL is unset, so it is
    make run's (var/redis.url) or the default; None when DTQ_REDIS_URL or settings.DTQ named it."""
    url = get_config().redis_url
    origin = getattr(settings, "DTQ_REDIS_URL_ORIGIN", None)
    if not origin or origin[0] != url or origin[1] == "DTQ_REDIS_URL":
        return None
    return f"reading {redacted(url)} (from {origin[1]})"


def how_far(exc: BaseException) -> str:
    """"dlq.retry stopped after 12,000 of 200,000" when exc cut an audited action short, else ""."""
    op = cut_short(exc)
    if op is None:
        return ""
    of = "" if op.selected is None else f" of {op.selected:,}"
    unrecorded = "" if op.closed else " (its audit entry stays unfinished)"
    return f"{op.action} stopped after {op.done:,}{of}{unrecorded}"


def interrupted(exc: KeyboardInterrupt) -> str:
    """The one line for Ctrl-C: what was cut short, if anything audited was under way."""
    progress = how_far(exc)
    return f"interrupted: {progress}; run the command again to finish" if progress else "interrupted"


class _Silenced(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return False


@contextmanager
def audit_log_silenced() -> Iterator[None]:
    """Keep dtq.audit's "outcome not recorded" warning off the operator's terminal: the command's
    one error line says it already (how_far), and a second line would break "one line on stderr"."""
    audit_log, silenced = logging.getLogger("dtq.audit"), _Silenced()
    audit_log.addFilter(silenced)
    try:
        yield
    finally:
        audit_log.removeFilter(silenced)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """Turn dtq errors and Redis outages into CommandError (one line, exit 1)."""
    try:
        with audit_log_silenced():
            yield
    except Exception as exc:
        trouble = translate(exc)
        progress = how_far(exc)
        if trouble is not None:
            line = one_line(trouble, redacted(get_config().redis_url))
            raise CommandError(f"{line}; {progress}" if progress else line) from None
        if isinstance(exc, DtqError):
            raise CommandError(exc.message) from None
        raise


class OperatorCommand(BaseCommand):
    """Base of `manage.py dlq|queue|task|periodic`: subcommands dispatched to `do_<name>` methods."""

    # The open-API warning (dtq.W001) is about HTTP; it would only be noise on an operator's terminal.
    requires_system_checks = []

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.__class__ = OneLineParser  # errors before the subcommand ("dtq dlq") are one line too
        return parser

    @staticmethod
    def subcommands(parser: CommandParser, *names: str) -> Any:
        """Add the required subcommand argument (dest "action"); its parsers report errors in one line."""
        return parser.add_subparsers(dest="action", required=True, metavar="{" + ",".join(names) + "}",
                                     parser_class=OneLineParser)

    def handle(self, *args: Any, action: str, **options: Any) -> None:
        for name, value in options.items():
            # Bytes that are not UTF-8 reach argv as lone surrogates, which cannot go to Redis.
            for text in value if isinstance(value, list) else [value]:
                if isinstance(text, str) and not is_unicode(text):
                    raise CommandError(f"argument {name}: {text!r} is not valid UTF-8 text", returncode=2)
        # An empty table from an unintended Redis must not pass for an empty queue (make run's Redis
        # is on 6380, the default URL on 6379): say which one. Stderr, so --json stays clean.
        implicit = implicit_redis()
        if implicit is not None:
            self.stderr.write(f"dtq: {implicit}")
        with one_line_errors():
            getattr(self, f"do_{action.replace('-', '_')}")(**options)

    def emit_json(self, value: Any) -> None:
        self.stdout.write(json.dumps(value, indent=2, ensure_ascii=False, default=str))

    def emit_table(self, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        cells = [[("" if v is None else str(v)) for v in row] for row in rows]
        widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
        for row in [list(headers), *cells]:
            self.stdout.write("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def page_limit(raw: str) -> int:
    if not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_PAGE:
        raise argparse.ArgumentTypeError(f"must be a whole number between 1 and {MAX_PAGE} (got {raw!r})")
    return int(raw)


def queue_name(raw: str) -> str:
    if not valid_queue_name(raw):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a queue name ([a-z0-9][a-z0-9_-]{{0,63}})")
    return raw


def task_type(raw: str) -> str:
    # Text that is not UTF-8 passes: OperatorCommand.handle names that trouble (in those words).
    if is_unicode(raw) and not TASK_TYPE_RE.fullmatch(raw):
        raise argparse.ArgumentTypeError(f"{raw!r} is not a task type (1-200 of letters, digits and _ . : -)")
    return raw


def short(text: Any, width: int = 60) -> str:
    value = "" if text is None else " ".join(str(text).split())
    return value if len(value) <= width else value[: width - 1] + "…"
