"""`python -m bench.bench_idle_handover`: where an idle sync worker's latency goes, point by point.

One worker process (`--concurrency 10`) serves one queue on a throwaway Redis; tasks are sent one
at a time, each once the previous body's INCR is seen, with a pause between them (`--pause-ms`,
default 2: the worker is idle when each arrives, as in the latency figures; 20 or more: sporadic
tasks, fewer than 100 a second). The worker imports
bench/probes/dtq_idle_probe.py, which stamps its path (see there); the driver stamps the submit.
Reported per tree, the median, 90th and 99th percentile (nearest rank, as bench.peers) in µs over all
tasks of all rounds:

- submit: the enqueue call, to its reply;
- reply -> claimed: the submit's reply at the client to the worker's wait returning with the task
  already claimed (the BLPOP and the fetch queued behind it). Redis answers both in the same turn
  of its event loop, so this can be below zero: the worker heard first;
- claimed -> handed: the worker's own Python until the attempt is handed to the threads;
- handed -> thread: until a handler thread starts it (the GIL, the thread's wake-up);
- thread -> body: the attempt's set-up in the thread, to the handler's first line;
- reply -> body: the four above together, the worker's share (the submit's own round trip moves
  with the machine's load more than anything the worker does);
- submit -> body: the enqueue call to the handler's first line (what `make bench`'s latency
  to the body measures, less the body's INCR reaching Redis).

`--compare DIR` runs a worker of another dtq tree (an unpacked `git archive`) in turns with this
one's (A B A B ...), stamped at the same points.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from uuid import uuid4

import redis

from .common import ROOT, VAR, percentile, start_redis, wait_until
from .dtq_bench import _stop, counter_key

QUEUE = "handover"
SEGMENTS = (("submit", "sent", "replied"), ("reply -> claimed", "replied", "returned"),
            ("claimed -> handed", "returned", "handed"), ("handed -> thread", "handed", "thread"),
            ("thread -> body", "thread", "body"), ("reply -> body", "replied", "body"),
            ("submit -> body", "sent", "body"))


def _worker(tree: Path, url: str, prefix: str, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.update({"DTQ_REDIS_URL": url, "DTQ_KEY_PREFIX": prefix, "DTQ_TASK_MODULES": "dtq_idle_probe",
                "PYTHONPATH": str(ROOT / "bench" / "probes"), "DJANGO_SETTINGS_MODULE": "dtq_site.settings",
                "DTQ_LOG_LEVEL": "WARNING",
                "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "dtq-bench-" + "0123456789" * 5})
    with open(log, "wb") as out:
        return subprocess.Popen([sys.executable, "manage.py", "runworker_dtq", "--queues", QUEUE, "--concurrency",
                                 "10"], cwd=tree, env=env, stdout=out, stderr=subprocess.STDOUT)


def _round(tree: Path, url: str, tasks: int, pause_s: float) -> list[dict[str, float]]:
    """One worker of `tree`, `tasks` sequential tasks; the stamps of each task, driver's and worker's."""
    from dtq_core.config import DtqConfig
    from dtq_core.engine import Engine

    prefix = f"handover{uuid4().hex[:8]}"
    engine = Engine(DtqConfig(redis_url=url, key_prefix=prefix, accept_unknown_types=True))
    client = redis.Redis.from_url(url)
    counter, dump_path = counter_key(prefix), VAR / f"{prefix}-stamps.json"
    proc = _worker(tree, url, prefix, VAR / f"{prefix}.log")
    try:
        sent: dict[str, tuple[float, float]] = {}
        for i in range(tasks + 10):  # the first 10 warm the worker up (thread start, connections)
            before = int(client.get(counter) or 0)
            start = time.monotonic()
            task_id = engine.tasks.enqueue("bench.handover", {"k": counter}, queue=QUEUE, record=False).id
            replied = time.monotonic()
            wait_until(lambda seen=before: int(client.get(counter) or 0) > seen, timeout=60 if i == 0 else 10,
                       interval=0.001, what=f"task {i} of the worker in {tree}")
            if i >= 10:
                sent[task_id] = (start, replied)
            time.sleep(pause_s)
        engine.tasks.enqueue("bench.handover_dump", {"path": str(dump_path)}, queue=QUEUE, record=False)
        wait_until(lambda: dump_path.exists() and dump_path.stat().st_size > 0, timeout=10, what="the stamps")
        time.sleep(0.1)  # the file is written by one json.dump: let it finish
        stamps = json.loads(dump_path.read_text())
    finally:
        _stop(proc)
        dump_path.unlink(missing_ok=True)
        for key in client.scan_iter(match=f"{prefix}:*", count=5000):
            client.unlink(key)
    rows = []
    for task_id, (start, replied) in sent.items():
        points = stamps.get(task_id, {})
        if {"returned", "handed", "thread", "body"} <= points.keys():  # else not taken by a list wait
            rows.append({"sent": start, "replied": replied, **points})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_idle_handover", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=300, help="timed tasks per round and tree (default 300)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare", type=Path, default=None, help="another dtq tree, reported as 'compare'")
    p.add_argument("--pause-ms", type=float, default=2.0,
                   help="pause between one task's body and the next submit (default 2; 20 and more: sporadic "
                        "tasks, under 100 a second)")
    args = p.parse_args(argv)
    if args.pause_ms < 0:
        p.error("--pause-ms must be 0 or more")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
    import django

    django.setup()
    VAR.mkdir(parents=True, exist_ok=True)
    trees = {"current": ROOT, **({"compare": args.compare.resolve()} if args.compare else {})}
    server = start_redis("handover")
    samples: dict[str, list[dict[str, float]]] = {name: [] for name in trees}
    try:
        for n in range(1, args.rounds + 1):
            for name, tree in trees.items():
                rows = _round(tree, server.url, args.tasks, args.pause_ms / 1000)
                samples[name] += rows
                print(f"round {n}: {name}: {len(rows)} of {args.tasks} tasks stamped", flush=True)
    finally:
        server.stop()
    for title, q in (("medians", 50), ("90th percentiles", 90), ("99th percentiles", 99)):
        print(f"\nAn idle sync worker, one task at a time, {args.pause_ms:g} ms apart: {title} in µs ({args.rounds} "
              f"round(s) of {args.tasks} tasks per tree, pooled; each column on its own, so the columns do not add "
              "up)\n")
        print("| tree | tasks | " + " | ".join(label for label, _, _ in SEGMENTS) + " |")
        print("|---|---|" + "---|" * len(SEGMENTS))
        for name, rows in samples.items():
            cells = [f"{(percentile([r[b] - r[a] for r in rows], q) or 0) * 1e6:,.0f}" if rows else "n/a"
                     for _, a, b in SEGMENTS]
            print(f"| {name} | {len(rows)} | " + " | ".join(cells) + " |")
    return 0 if all(samples.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
