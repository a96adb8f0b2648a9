"""Redis memory per task, per state, and what the retention policy costs in commands.

Run: .venv/bin/python -m bench.bench_memory [--tasks N]. On a throwaway Redis, N tasks of each
outcome are made the real way (submitted, run by an in-process burst worker, or cancelled, or
left to expire): SUCCEEDED (`dtq.echo` with a 66-byte payload, which it returns as its result),
DEAD_LETTERED (`dtq.fail`), CANCELLED (cancelled while queued) and EXPIRED (ttl passed before
start). Then MEMORY USAGE is summed over every key of the run's prefix and divided by the number
of tasks, by kind of key: task records, results, the retention indexes (includes/retain.lua) and
the rest (recent-tasks index, DLQ, streams, stats); beside it, what Redis itself counts for the
run (MEMORY STATS: dataset plus key tables, before and after, so each key's expiry entry and
table buckets are in), with the results and without them (as after DTQ_RESULT_RETENTION_S). Each
outcome runs twice, with the defaults
(compact records, count-bounded) and with DTQ_KEEP_PAYLOAD=all and no count bound (what dtq did
before retention had a policy), and the Redis commands per task of each drain are counted from
INFO commandstats. Unfinished tasks are measured too, once each (no policy applies to them):
QUEUED (submitted), PENDING (submitted with a delay) and RUNNING (claimed by a fetch, not
completed). A last run shows the count bound: 3x DTQ_SUCCEEDED_RETENTION_COUNT tasks, and what is
left.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
import uuid
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

import django

django.setup()

import redis  # noqa: E402

import dtq_tasks  # noqa: E402,F401  registers the built-in task types
from dtq_core.clock import iso  # noqa: E402
from dtq_core.config import DtqConfig  # noqa: E402
from dtq_core.engine import Engine  # noqa: E402
from dtq_core.engine.audit import Actor  # noqa: E402
from dtq_core.keys import Keys  # noqa: E402
from dtq_core.worker import Worker  # noqa: E402

from .common import commandstats, markdown_table, start_redis  # noqa: E402

PAYLOAD = {"message": "x" * 50}  # 66 bytes of JSON, the measure
OLD = {"keep_payload": "all", "succeeded_retention_count": 0, "failed_retention_count": 0,
       "succeeded_retention_s": 604800}


def kind(key: str) -> str:
    rest = key.split("}:", 1)[1] if "}:" in key else key
    for prefix, name in (("task:", "task records"), ("result:", "results"), ("retain:", "retention index"),
                         ("recent", "recent index")):
        if rest.startswith(prefix):
            return name
    return "other"


def usage(client: redis.Redis, prefix: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for key in client.scan_iter(match=f"{prefix}:*", count=5000):
        name = kind(key)
        out[name] = out.get(name, 0) + int(client.memory_usage(key, samples=0) or 0)
    return out


SETTLE_S = 0.12  # a little over one pass of Redis's client cron (hz 10, its default)
SETTLE_DEADLINE_S = 3.0
SETTLED_WITHIN = 64  # bytes: two readings this close, a cron pass apart, are the settled figure


def keyspace_bytes(client: redis.Redis) -> int:
    """What Redis holds for its keys, by its own count (MEMORY STATS): the dataset plus every
    database's key tables. MEMORY USAGE of a key leaves out what the keyspace spends on it: its
    entry in the expiry table, both tables' bucket arrays and the allocator's rounding of its
    entries (about 70 B a key with a TTL, issue 20 goal 9).

    The other connections are closed first (the run's engine and worker reconnect when next
    used): a client's own structure is counted in the dataset, so clients that come and go
    between two readings (a worker's, an old engine's when it is collected) would move it by
    tens of KB. Then the reading is repeated a cron pass apart until two agree: the dataset is
    used memory less the overheads, and Redis updates its figure for the clients' buffers in its
    cron, so for about 0.1 s after a large exchange (a bulk submit) the dataset is off by up to
    37 KB (seen here), 750 B a task in a 50-task run."""
    client.client_kill_filter(_type="normal", skipme=True)
    deadline = time.monotonic() + SETTLE_DEADLINE_S
    reading = _dataset_and_tables(client)
    while True:
        time.sleep(SETTLE_S)  # no event tells when the cron has run: poll, bounded by the deadline
        again = _dataset_and_tables(client)
        if abs(again - reading) <= SETTLED_WITHIN or time.monotonic() > deadline:
            return again
        reading = again


def _dataset_and_tables(client: redis.Redis) -> int:
    stats = client.memory_stats()
    tables = sum(int(v.get("overhead.hashtable.main", 0)) + int(v.get("overhead.hashtable.expires", 0))
                 for name, v in stats.items() if name.startswith("db.") and isinstance(v, dict))
    return int(stats["dataset.bytes"]) + tables


def empty(client: redis.Redis) -> None:
    """Delete the run's keys with the key tables (this Redis is the benchmark's own): keys deleted
    one by one leave the tables at their size until Redis's cron shrinks them, during the next
    run, which would take the shrink off that run's count."""
    client.flushdb()


def worker_name() -> str:
    """A worker id as long as the default one (<hostname>:<pid>) in a container, whose hostname is
    12 hex digits: a record keeps its worker's id, so its length counts."""
    return f"{uuid.uuid4().hex[:12]}:{os.getpid():07d}"


def claim_all(engine: Engine, n: int) -> None:
    """Claim the n queued tasks of the default queue as a worker's fetch does (fetchTasks), and
    leave them RUNNING: their records as a worker holds them while the handlers run."""
    layout = engine.registry.get("default")
    streams = [f"default:{p}" for p in ("high", "normal", "low")]
    cfg, name, claimed = engine.config, worker_name(), 0
    while claimed < n:
        now = engine.clock.now_ms()
        calls = [("fetchTasks", [engine.keys.partition(tag)],
                  [Keys.GROUP, name, now, iso(now), cfg.retention_arg, 1, cfg.dlq_maxlen, 500, layout.owner, 0,
                   *streams]) for tag in layout.all_tags]
        got = sum(len(reply[1]) for reply in engine.scripts.call_direct_many(calls))
        if not got:
            raise RuntimeError(f"claimed {claimed} of {n} tasks")
        claimed += got


def make(engine: Engine, outcome: str, n: int, payload: dict[str, Any] | None = None) -> None:
    """n tasks of one outcome or state, made the way dtq makes them, each with `payload` (default
    PAYLOAD); a DEAD_LETTERED task's `dtq.fail` payload is its message (and a given payload as its "data")."""
    cfg = engine.config
    payload = PAYLOAD if payload is None else payload
    if outcome in ("QUEUED", "PENDING", "RUNNING"):
        delay = 3600 if outcome == "PENDING" else 0
        for start in range(0, n, 1000):
            engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", payload, delay_seconds=delay)
                                       for _ in range(min(n, start + 1000) - start)])
        if outcome == "RUNNING":
            claim_all(engine, n)
        return
    if outcome == "CANCELLED":
        for _ in range(n):
            engine.tasks.cancel(engine.tasks.enqueue("dtq.echo", payload, record=False).id, Actor.cli())
        return
    for start in range(0, n, 1000):
        count = min(n, start + 1000) - start
        if outcome == "SUCCEEDED":
            subs = [engine.tasks.validate("dtq.echo", payload) for _ in range(count)]
        elif outcome == "DEAD_LETTERED":
            failing = {"message": "x" * 40} if payload is PAYLOAD else {"message": "x" * 40, "data": payload}
            subs = [engine.tasks.validate("dtq.fail", failing, max_attempts=1) for _ in range(count)]
        else:  # EXPIRED
            subs = [engine.tasks.validate("dtq.echo", payload, ttl_seconds=0.001) for _ in range(count)]
        engine.tasks.enqueue_many(subs)
    if outcome == "EXPIRED":
        time.sleep(0.05)
    asyncio.run(Worker(cfg, concurrency=50, burst=True, name=worker_name()).run())


RUNS = iter(range(100, 1000))


def new_prefix() -> str:
    """A fresh prefix as long as the default one ("dtq"): key names count in MEMORY USAGE."""
    return f"m{next(RUNS) % 100:02d}"


def measure(url: str, client: redis.Redis, outcome: str, n: int, policy: str,
            payload: dict[str, Any] | None = None) -> dict[str, Any]:
    prefix = new_prefix()
    overrides = OLD if policy == "keep all, no count" else {}
    engine = Engine(DtqConfig(redis_url=url, key_prefix=prefix, max_queue_depth=0, **overrides))
    engine.registry.ensure("default")
    space = keyspace_bytes(client)
    before = commandstats(client)
    make(engine, outcome, n, payload)
    after = commandstats(client)
    commands = sum(after.values()) - sum(before.values())
    per_command = {name: (after.get(name, 0) - before.get(name, 0)) / n for name in after}
    parts = usage(client, prefix)
    total = sum(parts.values())
    held = keyspace_bytes(client) - space
    # As after DTQ_RESULT_RETENTION_S: the results gone, the rest kept.
    for key in client.scan_iter(match=f"{prefix}:*result:*", count=5000):
        client.unlink(key)
    held_later = keyspace_bytes(client) - space
    row: dict[str, Any] = {"outcome": outcome, "policy": policy, "tasks": n,
                           "bytes_per_task": round(total / n, 1),
                           "record": round(parts.get("task records", 0) / n, 1),
                           "result": round(parts.get("results", 0) / n, 1),
                           "retain": round(parts.get("retention index", 0) / n, 1),
                           "recent": round(parts.get("recent index", 0) / n, 1),
                           "other": round(parts.get("other", 0) / n, 1),
                           "redis": round(held / n, 1), "redis_later": round(held_later / n, 1),
                           "commands_per_task": round(commands / n, 2), "per_command": per_command}
    empty(client)
    return row


def count_bound(url: str, client: redis.Redis, n: int) -> dict[str, Any]:
    prefix = new_prefix()
    count = max(1, n // 3)
    engine = Engine(DtqConfig(redis_url=url, key_prefix=prefix, max_queue_depth=0, succeeded_retention_count=count))
    engine.registry.ensure("default")
    before = commandstats(client)
    make(engine, "SUCCEEDED", n)
    after = commandstats(client)
    trim = {name: (after.get(name, 0) - before.get(name, 0)) / n for name in ("lpop", "zrem", "del", "rpush")}
    left = sum(1 for _ in client.scan_iter(match=f"{prefix}:*task:*", count=5000))
    results = sum(1 for _ in client.scan_iter(match=f"{prefix}:*result:*", count=5000))
    empty(client)
    return {"submitted": n, "count": count, "records_left": left, "results_left": results, "trim": trim}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_memory", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=2000, help="tasks per outcome and policy (default 2000)")
    args = p.parse_args(argv)
    server = start_redis("memory")
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        # A first run on a fresh Redis makes more script calls than the next ones (loading,
        # registration) and the first use of a script leaves its text in Redis: run each kind once
        # and drop it, so the policies are compared warm.
        for outcome in ("SUCCEEDED", "DEAD_LETTERED", "CANCELLED", "EXPIRED", "RUNNING"):
            measure(server.url, client, outcome, min(args.tasks, 100), "defaults")
        rows = [measure(server.url, client, outcome, args.tasks, policy)
                for outcome in ("SUCCEEDED", "DEAD_LETTERED", "CANCELLED", "EXPIRED")
                for policy in ("defaults", "keep all, no count")]
        rows += [measure(server.url, client, state, args.tasks, "any") for state in ("QUEUED", "PENDING", "RUNNING")]
        bound = count_bound(server.url, client, args.tasks)
    finally:
        server.stop()
    print(f"Redis memory per task (MEMORY USAGE over every key of the run / {args.tasks} tasks), by kind of "
          "key; what Redis itself counts for the run's keys (MEMORY STATS: the dataset and the key tables, "
          "which MEMORY USAGE leaves out), with the results and after they expire; and Redis commands per "
          "task of the run. Unfinished tasks (QUEUED, PENDING, RUNNING) once, as no retention policy "
          "applies to them:")
    print()
    print(markdown_table([("outcome", "outcome"), ("policy", "policy"), ("bytes_per_task", "bytes/task"),
                          ("record", "task record"), ("result", "result"), ("retain", "retention index"),
                          ("recent", "recent index"), ("other", "other"),
                          ("redis", "Redis's count/task"), ("redis_later", "without results"),
                          ("commands_per_task", "commands/task")], rows))
    print()
    for outcome in ("SUCCEEDED", "DEAD_LETTERED", "CANCELLED", "EXPIRED"):
        new, old = (next(r["per_command"] for r in rows if r["outcome"] == outcome and r["policy"] == policy)
                    for policy in ("defaults", "keep all, no count"))
        diff = {name: new.get(name, 0) - old.get(name, 0) for name in set(new) | set(old)}
        shown = ", ".join(f"{name} {d:+.2f}" for name, d in sorted(diff.items()) if abs(d) >= 0.01)
        print(f"{outcome}: commands per task, defaults minus keep-all: {shown or 'none'}")
    print()
    print(f"Count bound: {bound['submitted']} tasks succeeded with DTQ_SUCCEEDED_RETENTION_COUNT={bound['count']}: "
          f"{bound['records_left']} task records and {bound['results_left']} results left; per task "
          + ", ".join(f"{name} {v:.2f}" for name, v in bound["trim"].items())
          + " (DEL includes compaction's one per task, ZREM the running index's).")
    ok = bound["records_left"] == bound["count"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
