"""Runs inside a peer's virtualenv: enqueue tasks, or measure latency, and print one JSON line.

    python -m bench.peers.driver MODULE enqueue --body B --key K --n N --single S
    python -m bench.peers.driver MODULE latency --body B --key K --samples S --warmup W [--max-s T]

Latency is enqueue -> the task body's INCR, seen through a Redis keyspace notification on the
counter key (the orchestrator turns notifications on for that phase only), so every system is
timed by the same observer. The latency line carries every sample, so that a run can pool
its rounds and take p50/p99 from all of them.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import json
import math
import os
import time
from typing import Any

import redis

MIN_SAMPLES = 20


async def _call(fn: Any, *args: Any) -> None:
    result = fn(*args)
    if inspect.isawaitable(result):
        await result


async def enqueue(app: Any, key: str, n: int, single: int, body: str = "sync") -> dict[str, Any]:
    single = min(single, n)
    started = time.perf_counter()
    for _ in range(single):
        await _call(app.send, key, body)
    single_s = time.perf_counter() - started
    out: dict[str, Any] = {"enqueue_single_per_s": single / single_s if single else None,
                           "enqueue_bulk_per_s": None}
    rest = n - single
    started = time.perf_counter()
    if rest and hasattr(app, "send_many"):
        await _call(app.send_many, key, rest, body)
        out["enqueue_bulk_per_s"] = rest / (time.perf_counter() - started)
    elif rest and inspect.iscoroutinefunction(app.send):
        # No bulk API: fill the rest concurrently, in bounded waves.
        for start in range(0, rest, 200):
            await asyncio.gather(*[app.send(key, body) for _ in range(min(200, rest - start))])
    else:
        for _ in range(rest):
            await _call(app.send, key, body)
    return out


async def latency(app: Any, key: str, samples: int, warmup: int, max_s: float, body: str = "sync") -> dict[str, Any]:
    """Up to `samples` timed tasks after `warmup`; a system that polls slowly (arq's default 0.5 s)
    stops once `max_s` have passed and at least MIN_SAMPLES are in, so extra rounds stay affordable."""
    client = redis.Redis.from_url(os.environ["BENCH_REDIS_URL"])
    pubsub = client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(f"__keyspace@0__:{key}")
    times: list[float] = []
    timed_from = None
    for i in range(warmup + samples):
        if i == warmup:
            timed_from = time.monotonic()
        elif timed_from is not None and len(times) >= MIN_SAMPLES and time.monotonic() - timed_from > max_s:
            break
        started = time.perf_counter()
        await _call(app.send, key, body)
        # The first task also waits for the worker to come up.
        deadline = time.monotonic() + (120 if i == 0 else 10)
        while True:
            message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
            if message is not None and message["data"] in (b"incrby", b"incr"):
                break
            if message is None and time.monotonic() > deadline:
                raise TimeoutError(f"task {i} did not run within the deadline")
        if i >= warmup:
            times.append(time.perf_counter() - started)
    ordered = sorted(times)

    def pct(p: float) -> float:
        return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)] * 1000

    return {"samples": len(times), "p50_ms": pct(50), "p99_ms": pct(99),
            "times_ms": [round(t * 1000, 4) for t in times]}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("module")
    p.add_argument("action", choices=["enqueue", "latency"])
    p.add_argument("--key", required=True)
    p.add_argument("--body", choices=["sync", "async"], default="sync")
    p.add_argument("--n", type=int, default=0)
    p.add_argument("--single", type=int, default=2000)
    p.add_argument("--samples", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--max-s", type=float, default=120.0, help="latency: stop timing after this long (min 20 samples)")
    args = p.parse_args()
    app = importlib.import_module(f"bench.peers.apps.{args.module}")
    if args.action == "enqueue":
        out = asyncio.run(enqueue(app, args.key, args.n, args.single, args.body))
    else:
        out = asyncio.run(latency(app, args.key, args.samples, args.warmup, args.max_s, args.body))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
