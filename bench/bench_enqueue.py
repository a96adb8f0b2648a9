"""`python -m bench.bench_enqueue`: enqueue one by one, dtq beside Huey (and an older dtq tree);
`--bulk N`: enqueue in batches of N, this tree beside the --compare one.

Each system is a long-lived child process that enqueues a no-op task `--calls` times one by one
when told to; the children take turns for `--rounds` rounds on one throwaway Redis, so the load
of the moment on a shared machine weighs on all alike. Reported per system: the best and the
median rate, client CPU per call (the process's own user + system time) and round trips per
call (the child counts redis-py's writes, send_packed_command, which dtq's exchanges use too).
dtq's call is `dtq_tasks.enqueue` (what a Django view calls; settings.DTQ configured in the
child, at dtq's default settings: the depth gate, DTQ_MAX_QUEUE_DEPTH, checked by every submit),
Huey's is calling a task, as in bench/peers; both send the body {"k": "k"} (Huey as keyword
arguments). `--compare DIR --compare-settings JSON` runs the other tree with those DTQ settings
on top; `--compare . --compare-settings '{"MAX_QUEUE_DEPTH": 0}'` is what the gate costs. Huey
runs from bench/peers' virtualenv (make bench-peers makes it) or --huey-python.

`--bulk N` times dtq's bulk submit instead (`engine.tasks.enqueue_many` of N tasks, validated before
the clock starts, as the HTTP batch endpoint and bench/dtq_bench's pre-fill call it), `--calls`
tasks a turn, in the dtq trees only (Huey has no bulk submit), and adds the Redis CPU per task (the
server's used_cpu_user + used_cpu_sys over the turn: the children take turns, so it is theirs).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

from .common import ROOT, depth_cap_for, start_redis

WARMUP = 300  # enqueues before the measured rounds (CHILD)

CHILD = r"""
import json, os, sys, time
import redis.connection
kind, url = sys.argv[1], sys.argv[2]
sent = [0]  # writes to Redis: one per round trip (a pipeline or an exchange is one write)
_send = redis.connection.AbstractConnection.send_packed_command
def counted(self, command, check_health=True):
    sent[0] += 1
    return _send(self, command, check_health)
redis.connection.AbstractConnection.send_packed_command = counted
if kind == "huey":
    from huey import RedisHuey
    huey = RedisHuey("bench", url=url)
    @huey.task()
    def noop(k): pass
    send = lambda: noop(k="k")
else:
    sys.path.insert(0, os.getcwd())
    import django
    from django.conf import settings
    settings.configure(DTQ={"REDIS_URL": url, "KEY_PREFIX": sys.argv[3], **json.loads(sys.argv[4])})
    django.setup()
    import dtq_tasks
    send = lambda: dtq_tasks.enqueue("bench.noop", {"k": "k"}, queue="bench")
bulk = int(sys.argv[5]) if len(sys.argv) > 5 else 0
if bulk:
    from dtq_core.conf import get_engine
    engine = get_engine()
    def bulk_send(batches):
        for batch in batches:
            out = engine.tasks.enqueue_many(batch)
            assert all(getattr(o, "created", False) for o in out), out[0]
    new_batches = lambda n: [[engine.tasks.validate("bench.noop", {"k": "k"}, queue="bench") for _ in range(bulk)]
                             for _ in range(max(1, n // bulk))]
    bulk_send(new_batches(WARMUP))
else:
    for _ in range(WARMUP):
        send()
print("ready", flush=True)
def server_cpu():
    info = engine.client.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]
for line in sys.stdin:
    n = int(line)
    batches = new_batches(n) if bulk else None
    n = sum(len(b) for b in batches) if bulk else n
    redis_cpu = server_cpu() if bulk else 0.0
    sent[0] = 0
    wall, cpu = time.perf_counter(), time.process_time()
    if bulk:
        bulk_send(batches)
    else:
        for _ in range(n):
            send()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    rt = sent[0]
    redis_cpu = (server_cpu() - redis_cpu) / n * 1e6 if bulk else None
    print(json.dumps({"per_s": n / wall, "cpu_us": cpu / n * 1e6, "rt": rt / n, "redis_cpu_us": redis_cpu}),
          flush=True)
""".replace("WARMUP", str(WARMUP))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_enqueue", description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=1000, help="enqueues per turn (default 1000)")
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--compare", type=Path, default=None, help="another dtq tree, reported as dtq-before")
    p.add_argument("--compare-settings", type=json.loads, default={},
                   help="DTQ settings (JSON) for the --compare tree on top of the defaults, "
                        "e.g. '{\"MAX_QUEUE_DEPTH\": 0}'")
    p.add_argument("--huey-python", type=Path, default=ROOT / "var" / "bench-peers-venv" / "bin" / "python")
    p.add_argument("--bulk", type=int, default=0, help="time enqueue_many in batches of this many (dtq trees only)")
    args = p.parse_args(argv)
    if args.compare_settings and args.compare is None:
        p.error("--compare-settings applies to the --compare tree: give --compare DIR (. for this one)")
    cap = depth_cap_for(args.calls * args.rounds + WARMUP)  # nothing drains the queue
    own: dict[str, Any] = {} if cap is None else {"MAX_QUEUE_DEPTH": cap}
    bulk = [str(args.bulk)] if args.bulk else []
    systems: dict[str, tuple[list[str], Path]] = {
        "dtq": ([sys.executable, "-c", CHILD, "dtq", json.dumps(own), *bulk], ROOT)}
    if args.compare is not None:
        systems["dtq-before"] = ([sys.executable, "-c", CHILD, "dtq", json.dumps({**own, **args.compare_settings}),
                                  *bulk], args.compare)
    if args.bulk:
        print("--bulk: the dtq trees only (Huey has no bulk submit)", flush=True)
    elif args.huey_python.exists():
        systems["huey"] = ([str(args.huey_python), "-c", CHILD, "huey", "{}"], ROOT)
    else:
        print(f"skipping Huey: no {args.huey_python} (make bench-peers makes it)", flush=True)
    server = start_redis("enqueue")
    procs: dict[str, subprocess.Popen[str]] = {}
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in systems}
    try:
        for name, (command, cwd) in systems.items():
            procs[name] = proc = subprocess.Popen([*command[:4], server.url, f"bench{uuid.uuid4().hex[:8]}",
                                                   *command[4:]], cwd=cwd,
                                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready", name
        for _ in range(args.rounds):
            for name, proc in procs.items():
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{args.calls}\n")
                proc.stdin.flush()
                runs[name].append(json.loads(proc.stdout.readline()))
    finally:
        for proc in procs.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait(30)
        server.stop()
    how = f"in batches of {args.bulk}" if args.bulk else "one by one"
    print(f"{args.calls} enqueues {how} x {args.rounds} rounds, taking turns")
    print(f"| system | best /s | median /s | client CPU µs/{'task' if args.bulk else 'call'} (min, median) "
          f"| round trips/{'task' if args.bulk else 'call'} |{' Redis CPU µs/task (median) |' if args.bulk else ''}\n"
          f"|---|---|---|---|---|{'---|' if args.bulk else ''}")
    for name, results in runs.items():
        rates = sorted(r["per_s"] for r in results)
        cpus = sorted(r["cpu_us"] for r in results)
        redis_cpu = f" {statistics.median(r['redis_cpu_us'] for r in results):.1f} |" if args.bulk else ""
        print(f"| {name} | {rates[-1]:.0f} | {statistics.median(rates):.0f} "
              f"| {cpus[0]:.1f}, {statistics.median(cpus):.1f} "
              f"| {sum(r['rt'] for r in results) / len(results):.4f} |{redis_cpu}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
