"""The `dtq` console script: operator names from failure-modes.md mapped onto manage.py commands.

    dtq dlq list            -> manage.py dlq list
    dtq retry-dlq ...       -> manage.py dlq retry ...
    dtq discard-dlq ...     -> manage.py dlq discard ...
    dtq queue resume Q      -> manage.py queue resume Q
    dtq task show ID        -> manage.py task show ID
    dtq <anything else>     -> manage.py <anything else> (e.g. dtq runworker_dtq --queues q1)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ALIASES = {"retry-dlq": ["dlq", "retry"], "discard-dlq": ["dlq", "discard"], "list-dlq": ["dlq", "list"]}
USAGE = """usage: dtq COMMAND [ARGS...]

  dtq dlq list [--queue Q] [--type T] [--limit N] [--json]
  dtq dlq show ID
  dtq retry-dlq (ID... | --all) [--queue Q] [--type T] [--dry-run]
  dtq discard-dlq (ID... | --all) [--queue Q] [--type T] [--dry-run]
  dtq queue list [--json] | pause Q | resume Q | purge Q
  dtq task show ID [--json] | cancel ID
  dtq runworker_dtq [--queues q1,q2] [--concurrency N]
  dtq <any manage.py command>
"""


def translate(argv: list[str]) -> list[str]:
    """Map the operator's words to manage.py arguments."""
    if argv and argv[0] in ALIASES:
        return [*ALIASES[argv[0]], *argv[1:]]
    return list(argv)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # run from anywhere, installed or not
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(["dtq", *translate(args)])


if __name__ == "__main__":
    main()
