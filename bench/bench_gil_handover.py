"""What a blocking redis-py call costs in a thread, with the process free to use every CPU and
with it on one (docs/performance.md, "Issue 20 goal 2: one CPU for a worker's threads").

`python -m bench.bench_gil_handover [--calls N]`: N threads of this process make --calls INCRs
between them against a throwaway Redis (left free to use every CPU), first unpinned, then with
this process on one CPU; prints calls/s, CPU µs and context switches per call.
"""

from __future__ import annotations

import argparse
import os
import resource
import threading
import time

import redis

from .common import start_redis


def run(url: str, threads: int, calls: int) -> dict[str, float]:
    client = redis.Redis.from_url(url, socket_timeout=None, max_connections=1000)
    client.ping()
    each = calls // threads

    def work() -> None:
        for _ in range(each):
            client.incr("bench:gil")

    workers = [threading.Thread(target=work) for _ in range(threads)]
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    t1, r1 = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    total = each * threads
    client.close()
    return {"per_s": total / (t1 - t0),
            "cpu_us": (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) / total * 1e6,
            "switches": (r1.ru_nvcsw - r0.ru_nvcsw + r1.ru_nivcsw - r0.ru_nivcsw) / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    if not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2:
        raise SystemExit("needs Linux and at least 2 CPUs this process may use")
    allowed = os.sched_getaffinity(0)
    server = start_redis("gil")
    try:
        print("| threads | calls/s, every CPU | CPU µs/call | switches/call "
              "| calls/s, one CPU | CPU µs/call | switches/call |")
        print("|---|---|---|---|---|---|---|")
        for threads in (1, 2, 4, 10):
            os.sched_setaffinity(0, allowed)
            free = run(server.url, threads, args.calls)
            os.sched_setaffinity(0, {min(allowed)})
            one = run(server.url, threads, args.calls)
            print(f"| {threads} | {free['per_s']:,.0f} | {free['cpu_us']:.0f} | {free['switches']:.1f} "
                  f"| {one['per_s']:,.0f} | {one['cpu_us']:.0f} | {one['switches']:.1f} |")
    finally:
        os.sched_setaffinity(0, allowed)
        server.stop()


if __name__ == "__main__":
    main()
