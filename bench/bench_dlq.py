"""Bulk DLQ retry and discard of 10,000 dead letters on a throwaway Redis (target: retry < 5 s).

Run: .venv/bin/python -m bench.bench_dlq [--count N]. Dead letters are made the real way (failing
tasks run by an in-process burst worker); the timed part is the service-layer call that the API
(POST /api/v1/dlq/retry {"all": true}), the CLI (dlq retry --all) and the console share.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

import django

django.setup()

import dtq_tasks  # noqa: E402,F401  registers dtq.fail
from dtq_core.config import DtqConfig  # noqa: E402
from dtq_core.engine import Engine  # noqa: E402
from dtq_core.engine.audit import Actor  # noqa: E402
from dtq_core.engine.dlq import DlqSelection  # noqa: E402
from dtq_core.worker import Worker  # noqa: E402

from .common import start_redis  # noqa: E402

TARGET_S = 5.0


def dead_letter(engine: Engine, count: int) -> float:
    """Submit `count` tasks that fail permanently and run them to the DLQ; return seconds taken."""
    started = time.perf_counter()
    for start in range(0, count, 1000):
        engine.tasks.enqueue_many([engine.tasks.validate("dtq.fail", {"message": f"bench {i}"}, max_attempts=1)
                                   for i in range(start, min(count, start + 1000))])
    asyncio.run(Worker(engine.config, concurrency=200, burst=True, name="bench-dlq").run())
    return time.perf_counter() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_dlq", description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="dead letters to make (default 10000)")
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("dtq").setLevel(logging.ERROR)  # 10,000 "moved to the DLQ" lines are not the point
    server = start_redis("dlq")
    try:
        config = DtqConfig(redis_url=server.url, key_prefix="benchdlq", dlq_maxlen=max(10_000, args.count * 2))
        engine = Engine(config)
        seeded = dead_letter(engine, args.count)
        assert engine.dlq.count() == args.count, engine.dlq.count()
        print(f"seeded {args.count} dead letters in {seeded:.2f} s (enqueue + burst worker)")

        started = time.perf_counter()
        retried = engine.dlq.retry(DlqSelection(all=True), Actor.cli())
        retry_s = time.perf_counter() - started
        assert retried == args.count and engine.dlq.count() == 0
        assert engine.queues.get("default")["waiting"] == args.count
        print(f"bulk retry of {retried} dead letters: {retry_s:.3f} s ({retried / retry_s:,.0f}/s), "
              f"target < {TARGET_S:.0f} s: {'met' if retry_s < TARGET_S else 'MISSED'}")

        asyncio.run(Worker(config, concurrency=200, burst=True, name="bench-dlq-2").run())  # back to the DLQ
        started = time.perf_counter()
        discarded = engine.dlq.discard(DlqSelection(all=True), Actor.cli())
        discard_s = time.perf_counter() - started
        assert discarded == args.count and engine.dlq.count() == 0
        print(f"bulk discard of {discarded} dead letters: {discard_s:.3f} s ({discarded / discard_s:,.0f}/s)")
        print(f"audit entries written: {len(engine.audit.list(limit=10).items)} (one per bulk action)")
        return 0 if retry_s < TARGET_S else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
