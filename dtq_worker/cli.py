"""The `dtq` console script: operator names from failure-modes.md mapped onto manage.py commands.

    dtq dlq list            -> manage.py dlq list
    dtq retry-dlq ...       -> manage.py dlq retry ...
    dtq discard-dlq ...     -> manage.py dlq discard ...
    dtq queue resume Q      -> manage.py queue resume Q
    dtq task show ID        -> manage.py task show ID
    dtq <anything else>     -> manage.py <anything else> (e.g. dtq runworker_dtq --queues q1)
"""

from __future__ import annotations

import importlib
import importlib.util
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
  dtq queue list [--json] | pause Q | resume Q | purge Q | delete Q
  dtq queue limits Q [--concurrency N|none] [--rate 5/1s|none] [--group-concurrency N|none]
                     [--group-rate 10/60s|none] [--clear] [--json]
  dtq task show ID [--json] | cancel ID
  dtq periodic list [--json] | show NAME [--json] | pause NAME | resume NAME | trigger NAME | delete NAME
  dtq workflow list [--status S] [--limit N] [--json] | show ID [--json] | cancel ID
  dtq runworker_dtq [--queues q1,q2] [--concurrency N]
  dtq <any manage.py command>
"""


def translate(argv: list[str]) -> list[str]:
    """Map the operator's words to manage.py arguments."""
    if argv and argv[0] in ALIASES:
        return [*ALIASES[argv[0]], *argv[1:]]
    return list(argv)


def settings_module() -> str | None:
    """DJANGO_SETTINGS_MODULE; unset, dtq's own site when run from its checkout, else None.

    Puts the checkout on sys.path (run from anywhere), and the current directory only when the
    settings module is not found without it: a project's settings and apps then import without
    PYTHONPATH=. (as manage.py has its own directory there; a console script has only its bin/).
    Never otherwise: any redis.py or django/ in the directory an operator happens to be in would
    shadow the real package (bin/dtq runs Python with -P for the same reason).
    """
    checkout = (ROOT / "dtq_site" / "settings.py").is_file()  # bin/dtq, pip install -e
    if checkout and str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    named = os.environ.get("DJANGO_SETTINGS_MODULE") or ("dtq_site.settings" if checkout else None)
    cwd = os.getcwd()
    if named and not findable(named) and cwd not in sys.path:
        sys.path.insert(0, cwd)
    return named


def findable(module: str) -> bool:
    """Whether the module's top-level package is on sys.path (found, not imported)."""
    try:
        return importlib.util.find_spec(module.partition(".")[0]) is not None
    except (ImportError, ValueError):  # a malformed name: unimportable() says so
        return False


def unimportable(module: str) -> str | None:
    """The part of a dotted settings path that does not exist, or None when it imports.

    Only a missing settings module itself is reported here: an import error inside the settings
    is the project's own, and Django shows it in full.
    """
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
            return exc.name
        raise
    return None


def main(argv: list[str] | None = None) -> None:
    try:
        run(argv)
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (what it cut short), not a traceback
        sys.stderr.write(f"dtq: {interrupted(exc)}\n")
        raise SystemExit(130) from None  # 128 + SIGINT, as a shell reports it


def interrupted(exc: KeyboardInterrupt) -> str:
    """The line for Ctrl-C. Only an operator command can have an audited action under way, and
    then dtq_worker.ops is loaded: nothing is imported here, mid-interrupt."""
    ops = sys.modules.get("dtq_worker.ops")
    return ops.interrupted(exc) if ops is not None else "interrupted"


def run(argv: list[str] | None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        sys.stdout.write(USAGE)
        return
    settings = settings_module()
    if settings is None:
        sys.stderr.write("dtq: no Django settings: set DJANGO_SETTINGS_MODULE to your project's settings module "
                         "(e.g. DJANGO_SETTINGS_MODULE=mysite.settings) and run dtq from the project's directory\n")
        raise SystemExit(2)
    os.environ["DJANGO_SETTINGS_MODULE"] = settings
    missing = unimportable(settings)
    if missing:
        sys.stderr.write(f"dtq: cannot import the settings module {settings!r} (DJANGO_SETTINGS_MODULE): "
                         f"no module named {missing!r} in {os.getcwd()}; run dtq from the directory that holds "
                         f"your manage.py\n")
        raise SystemExit(2)
    from django.core.management import execute_from_command_line

    execute_from_command_line(["dtq", *translate(args)])


if __name__ == "__main__":
    main()
