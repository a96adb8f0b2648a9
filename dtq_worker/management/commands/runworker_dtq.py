"""manage.py runworker_dtq: run one dtq worker process (consumer, executor, heartbeats, reaper,
cancel watcher and scheduler candidacy). SIGTERM, SIGINT and SIGHUP (a terminal hanging up) drain;
a second SIGTERM or SIGINT exits at once. Ctrl-C before it serves exits 130 with one line."""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import os
import sys
import threading
from typing import Any

from django.core import checks
from django.core.checks.registry import CheckRegistry
from django.core.management.base import BaseCommand, CommandError, CommandParser

import dtq_core.django_tasks.runner  # noqa: F401  (registers django.task / django.atask: the Django Tasks backend)
import dtq_tasks  # noqa: F401  (registers the built-in types, before DTQ_TASK_MODULES can clash with them)
from dtq_core import registry
from dtq_core.conf import declared_periodic, declared_queue_limits, get_config
from dtq_core.config import ConfigError
from dtq_core.engine.periodic import validate_spec
from dtq_core.errors import ValidationError, WorkerNameTaken
from dtq_core.logs import TextFormatter
from dtq_core.middleware import enqueue_chain, execution_chain
from dtq_core.redis_errors import one_line, translate
from dtq_core.registry import TaskModuleError, import_task_modules
from dtq_core.task import valid_queue_name
from dtq_core.worker import Worker
from dtq_worker.ops import redacted

logger = logging.getLogger("dtq.worker")

# A worker serves no pages: checking these imports the URLconf, the admin and every template tag
# library (DRF, the console), about 0.4 s of start-up and 20 MB of memory per worker process.
WEB_ONLY_CHECKS = frozenset({checks.Tags.admin, checks.Tags.templates, checks.Tags.urls, checks.Tags.staticfiles})
_CHECKS_SWAP = threading.Lock()  # Command.check swaps django.core.checks.run_checks while it runs


def show_worker_logs() -> None:
    """A project's LOGGING that leaves dtq's loggers nowhere to go (Django's default: the root has
    no handler, so INFO is dropped) would hide what the worker serves, and its reclaims and
    retries: send them to stderr, in dtq's text format, at INFO. A project that routes them is left alone."""
    dtq = logging.getLogger("dtq")
    if dtq.hasHandlers():
        return
    handler = logging.StreamHandler()
    handler.setFormatter(TextFormatter())
    dtq.addHandler(handler)
    if dtq.getEffectiveLevel() > logging.INFO:
        dtq.setLevel(logging.INFO)


def queue_list(raw: str) -> list[str]:
    queues = [q.strip() for q in raw.split(",") if q.strip()]
    bad = [q for q in queues if not valid_queue_name(q)]
    if bad:
        raise argparse.ArgumentTypeError(f"not a queue name: {bad[0]!r} (names match [a-z0-9][a-z0-9_-]{{0,63}}, "
                                         f"and dlq and audit are reserved)")
    if not queues:
        raise argparse.ArgumentTypeError(f"expected comma-separated queue names (got {raw!r})")
    return queues


def positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1 or value > 10000:
        raise argparse.ArgumentTypeError(f"expected a whole number from 1 to 10000 (got {raw!r})")
    return value


def worker_name(raw: str) -> str:
    if not raw or len(raw) > 200 or any(c.isspace() for c in raw):
        raise argparse.ArgumentTypeError(f"expected 1-200 characters without spaces (got {raw!r})")
    return raw


class Command(BaseCommand):
    help = "Run a dtq worker: consume tasks, run handlers, reclaim, schedule."

    def check(self, *args: Any, **kwargs: Any) -> None:
        """Django's system checks before start (unless --skip-checks), but not WEB_ONLY_CHECKS.

        Selecting by tags would also drop every untagged check, such as the Tasks backport's
        check of settings.TASKS, so Django's check runs on a registry without the web-only ones.
        """
        worker_checks = CheckRegistry()
        for check in checks.registry.registry.get_checks():
            if not check.tags or not set(check.tags) <= WEB_ONLY_CHECKS:
                worker_checks.register(check, *check.tags)
        with _CHECKS_SWAP:  # two overlapping swaps could leave the filtered registry in place
            run_all = checks.run_checks
            checks.run_checks = worker_checks.run_checks  # what BaseCommand.check calls
            try:
                super().check(*args, **kwargs)
            finally:
                checks.run_checks = run_all

    def execute(self, *args: Any, **options: Any) -> str | None:
        # Until Worker.serve takes SIGINT over (to drain), Ctrl-C raises KeyboardInterrupt: in
        # Django's checks, the task modules' imports or the first connection. Nothing is
        # registered yet, so one line says so instead of a traceback.
        try:
            return super().execute(*args, **options)
        except KeyboardInterrupt:
            raise CommandError("interrupted while starting: the worker had not started serving",
                               returncode=130) from None

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--queues", type=queue_list, default=None,
                            help="comma-separated queue names (default: every known queue)")
        parser.add_argument("--concurrency", type=positive_int, default=10, help="attempts run at once (default 10)")
        parser.add_argument("--name", type=worker_name, default=None,
                            help="worker id; unique among live workers (default <hostname>:<pid>)")
        parser.add_argument("--burst", action="store_true", help="drain the queues, then exit")
        parser.add_argument("--max-tasks", type=positive_int, default=None, help="exit after this many attempts")

    def handle(self, *args: Any, queues: list[str] | None, concurrency: int, name: str | None, burst: bool,
               max_tasks: int | None, **options: Any) -> None:
        config = get_config()
        try:
            import_task_modules(config.task_modules)
            periodic = declared_periodic()
            for spec in periodic:  # a bad declaration stops the start, naming it
                validate_spec(config, spec)
        except TaskModuleError as exc:
            raise CommandError(str(exc)) from None
        except (ConfigError, ValidationError) as exc:
            raise CommandError(f"periodic schedules: {getattr(exc, 'message', exc)}") from None
        try:
            queue_limits = declared_queue_limits()
            # A middleware path that does not import stops the start, naming it (not the first task).
            enqueue_chain(config.enqueue_middleware)
            execution_chain(config.execution_middleware)
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
        worker = Worker(config, queues=queues, concurrency=concurrency, name=name, burst=burst, max_tasks=max_tasks,
                        periodic=periodic, queue_limits=queue_limits)
        show_worker_logs()
        types = registry.names()
        logger.info("worker_id=%s serving queues=%s concurrency=%d redis=%s task_types=%d (%s)", worker.worker_id,
                    ",".join(worker.fixed_queues or ["*"]), concurrency, redacted(config.redis_url), len(types),
                    ", ".join(types[:10]) + (", ..." if len(types) > 10 else ""))
        # Django, DRF and the task modules leave a large heap of objects that live as long as the
        # process: keep them out of the garbage collector's full passes, which would otherwise
        # walk all of them again and again while tasks churn through short-lived objects.
        gc.collect()
        gc.freeze()
        try:
            code = asyncio.run(worker.serve())  # the drain is Worker._drain
        except WorkerNameTaken as exc:
            raise CommandError(str(exc)) from None
        except Exception as exc:
            trouble = translate(exc)
            if trouble is None:
                raise
            raise CommandError(one_line(trouble, redacted(config.redis_url))) from None
        sys.stdout.flush()
        sys.stderr.flush()
        if worker.threads.detached:
            # Left by timeouts or cancels, or by the drain past their timeout: they must not keep
            # the process alive.
            os._exit(code)
        if code:
            raise SystemExit(code)
