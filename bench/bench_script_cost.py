"""`python -m bench.bench_script_cost [--compare DIR]`: what a hot-path script costs Redis per call
(issue 20, goal 4), apart from the tasks it handles.

Each case is a child process, in this tree or the one given by --compare, that calls one script
`--calls` times on one throwaway Redis (command stats reset after 300 unmeasured calls) and
reports Redis's own time per call (`cmdstat_evalsha` and `cmdstat_fcall` usec over the calls):
- `fetchTasks` of a queue partition with nothing to read (what an idle or lightly loaded worker
  pays per fetch);
- `completeTasks` with an empty batch (the fixed part of every completion call);
- a submit (`enqueueTask`) of one task, its whole cost (the fixed part and the task);
- a bulk submit of 100 tasks to one partition (`engine.tasks.enqueue_many`), per 100 tasks;
- a fetch and a completion of one task each (fetch one, complete it: a worker that runs one task
  at a time, as on the latency path), and each of the two on its own (`fetch-one`: a fetch that
  claims one queued task; `complete-one`: the completion of one claimed task);
- a fetch of 10 tasks and their completion in one call (what a busy worker's batches cost: the
  fixed part shared by 10 tasks), per pair of calls;
- `EVALSHA` of `return 1`: the floor of any script call;
- the empty fetch and completion sent as `EVALSHA` of this tree's scripts (what a Redis that
  refuses functions gets: dtq_core/scripts/library.py).
Rounds take turns, so the load of the moment weighs on all alike. `--payload-bytes N` gives the
tasks a payload of N bytes of JSON instead of {"k": "k"}; `--config NAME=VALUE` sets a Redis
setting on the benchmark's Redis first (e.g. `hash-max-listpack-value=1024`: docs/deployment.md).

`--instructions` runs the Redis under valgrind's callgrind instead and reports the instructions
Redis executed per call of each case (everything the server did for it: reading the command,
the script, its commands, the reply). Those counts do not depend on what else the machine is
doing, so a change of a few percent shows where microseconds drown in noise; the server runs
about 50 times slower, so keep --calls small (300 is plenty).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import redis

from tests.redis_server import RedisServer

from .common import ROOT, VAR, apply_redis_settings, redis_setting, start_redis

CHILD = r'''
import json, os, sys, time, uuid
sys.path.insert(0, os.getcwd())
import redis
from dtq_core.clock import iso
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.keys import Keys
from dtq_core.partitions import parse_registry
from dtq_core.scripts import SOURCES
from dtq_core.worker.store import stream_suffix
url, case, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
size = int(os.environ.get("BENCH_PAYLOAD_BYTES") or 0)  # the tasks' payload: {"k": "k"}, or this many bytes of JSON
PAYLOAD = {"k": "x" * max(1, size - 8)} if size else {"k": "k"}
config = DtqConfig(redis_url=url, key_prefix="b" + uuid.uuid4().hex[:8])  # the defaults: a submit checks the depth gate
engine = Engine(config)
r = redis.Redis.from_url(url, decode_responses=True)
keys = Keys(config.key_prefix)
engine.tasks.enqueue("bench.noop", PAYLOAD, queue="bench", record=False)
layout = parse_registry(r.hgetall(keys.queues()))["bench"]
tag = layout.all_tags[0]
pkey = keys.partition(tag)
streams = [f"bench:{p}" for p in ("high", "normal", "low")]
try:  # a tree with the hot-path scripts as Redis functions calls those
    from dtq_core.scripts import LIBRARIES
except ImportError:
    LIBRARIES = {}
sha = {name: r.script_load(SOURCES[name]) for name in ("fetchTasks", "completeTasks")}
head = {name: ["EVALSHA", sha[name]] for name in sha}
for name in sha:
    if name in LIBRARIES:
        r.function_load(LIBRARIES[name].source, replace=True)
        head[name] = ["FCALL", LIBRARIES[name].function]
one = r.script_load("return 1")
group = Keys.GROUP

def claim(now):
    return [group, "w1", now, iso(now), config.retention_arg, 1, config.dlq_maxlen]

if case.endswith("-evalsha"):  # this tree's scripts sent as EVALSHA: a Redis that refuses functions
    head = {name: ["EVALSHA", sha[name]] for name in sha}

def fetch(n):
    now = int(time.time() * 1000)
    return r.execute_command(*head["fetchTasks"], 1, pkey, *claim(now), n, layout.owner, 0, *streams)

def complete(rows):
    now = int(time.time() * 1000)
    records = [[row[3], str(row[4]), row[1], stream_suffix(row[2]), "ok", "null", "0", "", "", "", "0",
                "0.001", "0.005"] for row in rows]
    reply = r.execute_command(*head["completeTasks"], 1, pkey, group, now, iso(now), config.retention_arg,
                              config.result_retention_s * 1000, 1, config.dlq_maxlen, json.dumps(records), 0,
                              1)  # the samples returned, as a worker's completions do (worker/samples.py)
    return reply[:len(rows)]  # the statuses (a tree that returns the samples adds them last)

fetch(1000)  # the first task: claimed and dropped
warm = 30 if os.environ.get("BENCH_CALLGRIND") else 300  # the unmeasured calls before the counted ones
claimed = []  # complete-one: the rows its calls complete, one a call
if case in ("fetch-one", "complete-one"):  # one queued task for every call, submitted beforehand
    for _ in range(warm + calls):
        engine.tasks.enqueue("bench.noop", PAYLOAD, queue="bench", record=False)
    while case == "complete-one" and len(claimed) < warm + calls:
        claimed += fetch(100)[1]
    claimed.reverse()  # popped from the end: oldest first
if case == "batch-10":  # the tasks its fetches claim, submitted before the counted calls
    for _ in range((calls + 300) * 10):
        engine.tasks.enqueue("bench.noop", PAYLOAD, queue="bench", record=False)
def run_case():
    if case in ("fetch-empty", "fetch-empty-evalsha"):
        fetch(10)
    elif case in ("complete-empty", "complete-empty-evalsha"):
        complete([])
    elif case == "return1":
        r.evalsha(one, 0)
    elif case == "submit":
        engine.tasks.enqueue("bench.noop", PAYLOAD, queue="bench", record=False)
    elif case == "submit-batch-100":
        out = engine.tasks.enqueue_many([engine.tasks.validate("bench.noop", PAYLOAD, queue="bench")
                                         for _ in range(100)])
        assert all(getattr(o, "created", False) for o in out), out
    elif case == "fetch-one":
        rows = fetch(1)[1]
        assert len(rows) == 1 and rows[0][0] == "run", rows
    elif case == "complete-one":
        assert complete([claimed.pop()]) == ["SUCCEEDED"]
    elif case == "one-task":
        engine.tasks.enqueue("bench.noop", PAYLOAD, queue="bench", record=False)
        drained, rows = fetch(1)[:2]
        assert len(rows) == 1 and rows[0][0] == "run", rows
        statuses = complete(rows)
        assert statuses == ["SUCCEEDED"], statuses
    elif case == "batch-10":
        rows = fetch(10)[1]
        assert len(rows) == 10, rows
        assert complete(rows) == ["SUCCEEDED"] * 10

import glob, subprocess
callgrind = os.environ.get("BENCH_CALLGRIND")  # "<redis pid>:<dump file prefix>": count instructions
for _ in range(warm):
    run_case()
r.config_resetstat()
if callgrind:
    pid, dumps = callgrind.split(":", 1)
    subprocess.run(["callgrind_control", "-z", pid], check=True, capture_output=True)
for _ in range(calls):
    run_case()
instructions = None
if callgrind:  # dumped before INFO, whose own instructions are not the calls'
    before = set(glob.glob(dumps + ".*"))
    subprocess.run(["callgrind_control", "-d", pid], check=True, capture_output=True)
    deadline = time.monotonic() + 60
    while not (new := set(glob.glob(dumps + ".*")) - before) and time.monotonic() < deadline:
        time.sleep(0.05)
    dump = max(new, key=os.path.getmtime) if new else None
    while dump and instructions is None and time.monotonic() < deadline:  # written after it appears
        for line in open(dump):
            if line.startswith("summary:"):
                instructions = int(line.split()[1])
        time.sleep(0.05)
    if instructions is None:
        sys.exit(f"no callgrind dump with a summary under {dumps}.* within 60 s")
stats = r.info("commandstats")
scripts = [stats.get(name, {}) for name in ("cmdstat_evalsha", "cmdstat_fcall")]
out = {"calls": sum(s.get("calls", 0) for s in scripts), "usec": sum(s.get("usec", 0) for s in scripts)}
if callgrind:
    out["instructions"] = instructions
print(json.dumps(out))
'''

CASES = ("return1", "fetch-empty", "complete-empty", "submit", "submit-batch-100", "fetch-one", "complete-one",
         "one-task", "batch-10", "fetch-empty-evalsha", "complete-empty-evalsha")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_script_cost", description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--compare", type=Path, default=None, help="another dtq tree, measured as 'before'")
    p.add_argument("--instructions", action="store_true",
                   help="run Redis under valgrind's callgrind and report instructions per call (try --calls 300)")
    p.add_argument("--cases", default=",".join(CASES), help=f"comma-separated, of: {', '.join(CASES)}")
    p.add_argument("--payload-bytes", type=int, default=0,
                   help="the tasks' payload as this many bytes of JSON (default: {\"k\": \"k\"}, 9 bytes)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE", type=redis_setting,
                   help="CONFIG SET on the benchmark's Redis before the runs (e.g. hash-max-listpack-value=1024)")
    args = p.parse_args(argv)
    cases = tuple(c for c in CASES if c in args.cases.split(","))
    trees = [("this tree", ROOT)] + ([("before", args.compare)] if args.compare is not None else [])
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(c, t): [] for c in cases for t, _ in trees}
    server, env = _start_server(args.instructions)
    env["BENCH_PAYLOAD_BYTES"] = str(args.payload_bytes)
    try:
        apply_redis_settings(redis.Redis.from_url(server.url), args.config)
        for _ in range(args.rounds):
            for case in cases:
                for tree, cwd in trees:
                    out = subprocess.run([sys.executable, "-c", CHILD, server.url, case, str(args.calls)], cwd=cwd,
                                         capture_output=True, text=True, check=True, env=env)
                    runs[(case, tree)].append(json.loads(out.stdout))
    finally:
        server.stop()
    if args.instructions:
        print(f"{args.calls} calls per case x {args.rounds} rounds, taking turns; instructions Redis executed "
              "per call (callgrind; median of rounds)")
        _table(cases, trees, lambda r: r["instructions"] / args.calls, "{:,.0f}", runs)
        return 0
    print(f"{args.calls} calls per case x {args.rounds} rounds, taking turns; Redis µs per call "
          "(cmdstat_evalsha + cmdstat_fcall, median of rounds)")
    _table(cases, trees, lambda r: r["usec"] / args.calls, "{:.1f}", runs)
    print("(one-task: a submit, a fetch of it and its completion: three calls, µs per task; "
          "batch-10: a fetch of 10 and their completion, µs per pair of calls, 10 tasks; "
          "submit-batch-100: µs per 100 tasks)")
    return 0


def _table(cases: tuple[str, ...], trees: list[tuple[str, Path]], per_call: Any, fmt: str,
           runs: dict[tuple[str, str], list[dict[str, float]]]) -> None:
    head = " | ".join(t for t, _ in trees)
    print(f"| case | {head} |\n|---|{'---|' * len(trees)}")
    for case in cases:
        cells = [fmt.format(statistics.median(per_call(r) for r in runs[(case, tree)])) for tree, _ in trees]
        print(f"| {case} | {' | '.join(cells)} |")


def _start_server(instructions: bool) -> tuple[RedisServer, dict[str, str]]:
    """A throwaway Redis, under callgrind when counting instructions (its dumps under var/)."""
    if not instructions:
        return start_redis("script-cost"), dict(os.environ)
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    directory = VAR / f"redis-script-instructions-{os.getpid()}"
    dumps = directory / "callgrind.out"
    server = RedisServer(directory, appendonly=False,
                         wrapper=["valgrind", "--tool=callgrind", f"--callgrind-out-file={dumps}"])
    server.start(wait=False)
    server.wait_ready(timeout=120)
    assert server.process is not None
    # valgrind runs redis-server in its own process: callgrind_control finds it by that pid.
    return server, {**os.environ, "BENCH_CALLGRIND": f"{server.process.pid}:{dumps}"}


if __name__ == "__main__":
    sys.exit(main())
