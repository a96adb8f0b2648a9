"""`python -m bench.bench_submit_commands [--compare DIR]`: Redis work per submit (issue 22).

Each case is a child process that submits `--calls` tasks one by one (after 300 unmeasured) on
one throwaway Redis, whose command stats are reset before: reported are the commands the
submit script runs per submit (a script's inner commands, EVALSHA itself left out) and the
Redis CPU per EVALSHA. Cases: a plain submit (also in the tree given by --compare, as
"before"), a unique key that is held (while_active, throttle) or replaced (debounce), and a
while_active submit with a new key each time (a new task that takes its key). Every case runs at
dtq's defaults, so a submit that creates a task checks the depth gate (DTQ_MAX_QUEUE_DEPTH: an
XLEN per priority stream). Rounds take turns, so the load of the moment weighs on all alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from .common import ROOT, start_redis

CHILD = r'''
import json, os, sys, uuid
sys.path.insert(0, os.getcwd())
import redis
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
url, mode, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
# dtq's defaults: the depth gate on.
tasks = Engine(DtqConfig(redis_url=url, key_prefix="b" + uuid.uuid4().hex[:8])).tasks
fresh = mode == "new-key"
extra = {} if mode == "plain" else {"unique_key": "k", "unique_mode": "while_active" if fresh else mode}
if mode in ("throttle", "debounce"):
    extra["unique_window_s"] = 3600
n = iter(range(10**9))
def send():
    if fresh:
        extra["unique_key"] = str(next(n))
    tasks.enqueue("bench.noop", {"k": "k"}, queue="bench", record=False, **extra)
for _ in range(300):
    send()
r = redis.Redis.from_url(url, decode_responses=True)
r.config_resetstat()
for _ in range(calls):
    send()
stats = r.info("commandstats")
script = ("cmdstat_evalsha", "cmdstat_fcall")  # the submit is an FCALL since it became a Redis function
inner = sum(v["calls"] for k, v in stats.items() if k not in (*script, "cmdstat_config", "cmdstat_info"))
usec = sum(stats.get(k, {}).get("usec", 0) for k in script)
print(json.dumps({"commands": inner / calls, "evalsha_us": usec / calls}))
'''


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_submit_commands", description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=3000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare", type=Path, default=None, help="another dtq tree: its plain submit, as before")
    args = p.parse_args(argv)
    cases = [(f"{mode}", ROOT, mode) for mode in ("plain", "while_active", "throttle", "debounce")]
    if args.compare is not None:
        cases.insert(1, ("plain (before)", args.compare, "plain"))
    cases.append(("while_active, a new key each time", ROOT, "new-key"))
    runs: dict[str, list[dict[str, float]]] = {name: [] for name, _, _ in cases}
    server = start_redis("submit-commands")
    try:
        for _ in range(args.rounds):
            for name, cwd, mode in cases:
                out = subprocess.run([sys.executable, "-c", CHILD, server.url, mode, str(args.calls)], cwd=cwd,
                                     capture_output=True, text=True, check=True)
                runs[name].append(json.loads(out.stdout))
    finally:
        server.stop()
    print(f"{args.calls} submits one by one per case x {args.rounds} rounds, taking turns")
    print("| submit | Redis commands per submit | Redis µs per EVALSHA (median, min) |\n|---|---|---|")
    for name, results in runs.items():
        us = [r["evalsha_us"] for r in results]
        print(f"| {name} | {statistics.median(r['commands'] for r in results):.2f} "
              f"| {statistics.median(us):.1f}, {min(us):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
