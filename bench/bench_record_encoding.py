"""`python -m bench.bench_record_encoding`: what Redis's `hash-max-listpack-value` does to dtq's
task records (docs/deployment.md, "Redis persistence").

A task record is a Redis hash. Redis keeps a small hash as one listpack (one allocation) and turns
it into a hashtable (an entry, a key and a value allocation per field) as soon as one value is
longer than `hash-max-listpack-value`, 64 bytes by default: a payload or an error history longer
than that makes an unfinished or failed task's record about twice its size. For payloads
of each size in --payloads (bytes of JSON) and each setting in --values, on one throwaway Redis
(`CONFIG SET` between runs, so the settings take turns):

- **memory** per task by Redis's own count (bench.bench_memory.keyspace_bytes: the dataset and
  the key tables) for QUEUED and RUNNING tasks, DEAD_LETTERED ones (`dtq.fail`, the payload kept
  with its error history) and SUCCEEDED ones (a compact record, no payload; the result kept);
- **Redis CPU** per task (`used_cpu_user + used_cpu_sys`, and the scripts' own time from INFO
  commandstats) of a bulk submit and of a drain by an in-process burst worker (`dtq.echo`,
  --concurrency 50), medians of --rounds, and the drain's rate.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

import django

django.setup()

import redis  # noqa: E402

from dtq_core.config import DtqConfig  # noqa: E402
from dtq_core.engine import Engine  # noqa: E402
from dtq_core.worker import Worker  # noqa: E402

from .bench_memory import empty, measure, new_prefix, worker_name  # noqa: E402
from .common import commandstats_usec, markdown_table, server_totals, start_redis  # noqa: E402

STATES = ("QUEUED", "RUNNING", "DEAD_LETTERED", "SUCCEEDED")


def payload_of(size: int) -> dict[str, str]:
    """A payload of `size` bytes of compact JSON (at least 14: {"message":""})."""
    return {"message": "x" * max(0, size - 14)}


def redis_cpu(client: redis.Redis) -> tuple[float, int]:
    """(used_cpu_user + used_cpu_sys in µs, the scripts' usec from INFO commandstats)."""
    usec = commandstats_usec(client)
    return server_totals(client)["cpu_s"] * 1e6, usec.get("fcall", 0) + usec.get("evalsha", 0)


def cpu_run(url: str, client: redis.Redis, payload: dict[str, str], n: int) -> tuple[float, ...]:
    """(submit CPU, submit script time, drain CPU, drain script time in µs per task, drain tasks/s)."""
    engine = Engine(DtqConfig(redis_url=url, key_prefix=new_prefix(), max_queue_depth=0))
    engine.registry.ensure("default")
    c0, s0 = redis_cpu(client)
    for start in range(0, n, 1000):
        count = min(n, start + 1000) - start
        engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", payload) for _ in range(count)])
    c1, s1 = redis_cpu(client)
    began = time.perf_counter()
    asyncio.run(Worker(engine.config, concurrency=50, burst=True, name=worker_name()).run())
    wall = time.perf_counter() - began
    c2, s2 = redis_cpu(client)
    empty(client)
    return (c1 - c0) / n, (s1 - s0) / n, (c2 - c1) / n, (s2 - s1) / n, n / wall


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_record_encoding", description=__doc__.splitlines()[0])
    p.add_argument("--payloads", default="64,200,1000,3000", help="payload sizes, bytes of JSON")
    p.add_argument("--values", default="64,1024,4096", help="hash-max-listpack-value settings (64: Redis's default)")
    p.add_argument("--tasks", type=int, default=2000, help="tasks per memory run (default 2000)")
    p.add_argument("--drain-tasks", type=int, default=10000, help="tasks per CPU run (default 10000)")
    p.add_argument("--rounds", type=int, default=3, help="CPU runs per payload and setting, taking turns")
    args = p.parse_args(argv)
    sizes = [int(v) for v in args.payloads.split(",")]
    values = [v.strip() for v in args.values.split(",")]
    server = start_redis("encoding")
    rows: list[dict[str, Any]] = []
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        for state in STATES:  # warm: a script's first use leaves its text in Redis (bench_memory)
            measure(server.url, client, state, min(args.tasks, 100), "defaults")
        for size in sizes:
            payload = payload_of(size)
            cpu: dict[str, list[tuple[float, ...]]] = {v: [] for v in values}
            for _ in range(args.rounds):
                for value in values:
                    client.config_set("hash-max-listpack-value", value)
                    cpu[value].append(cpu_run(server.url, client, payload, args.drain_tasks))
            for value in values:
                client.config_set("hash-max-listpack-value", value)
                row: dict[str, Any] = {"payload": size, "value": value}
                for state in STATES:
                    policy = "any" if state in ("QUEUED", "RUNNING") else "defaults"
                    row[state] = measure(server.url, client, state, args.tasks, policy, payload)["redis"]
                med = [statistics.median(run[i] for run in cpu[value]) for i in range(5)]
                row.update(submit_cpu=round(med[0], 1), submit_scripts=round(med[1], 1), drain_cpu=round(med[2], 1),
                           drain_scripts=round(med[3], 1), drain_rate=round(med[4]))
                rows.append(row)
    finally:
        server.stop()
    print(f"Task records and hash-max-listpack-value: Redis's own count of memory per task ({args.tasks} tasks a "
          f"state), and Redis CPU per task of a bulk submit and a drain ({args.drain_tasks} tasks, median of "
          f"{args.rounds} runs taking turns):")
    print()
    print(markdown_table([("payload", "payload bytes"), ("value", "hash-max-listpack-value"),
                          ("QUEUED", "QUEUED B/task"), ("RUNNING", "RUNNING B/task"),
                          ("DEAD_LETTERED", "DEAD_LETTERED B/task"), ("SUCCEEDED", "SUCCEEDED B/task"),
                          ("submit_cpu", "submit Redis CPU µs/task"), ("submit_scripts", "of it scripts"),
                          ("drain_cpu", "drain Redis CPU µs/task"), ("drain_scripts", "of it scripts"),
                          ("drain_rate", "drain tasks/s")], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
