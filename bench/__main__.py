"""`make bench`: dtq alone, with real processes on a throwaway Redis.

Drain of pre-filled no-op tasks by 1, 2 and 4 worker processes (runs interleaved, medians),
enqueue rates, Redis round trips per task, worker peak RSS, end-to-end latency on an idle
worker, redelivery after SIGKILL, submit rate over HTTP; then the DLQ, console and memory
(bytes per finished task by outcome) benchmarks when they are present. Results go to
bench/results/dtq-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import django

from . import dtq_bench as b
from . import no_history
from .common import RESULTS, ROOT, fmt, machine, markdown_table, median, now_iso, ratio, start_redis, write_results

# Owned by other modules; run when present.
OTHER_BENCHES = ("bench_dlq", "bench_console", "bench_memory", "bench_record_encoding", "bench_workflows",
                 "bench_integrations")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=20000, help="tasks pre-filled per drain run (default 20000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds; medians are reported (default 3)")
    p.add_argument("--workers", default="1,2,4", help="worker-process counts for the drain (default 1,2,4)")
    p.add_argument("--concurrency", type=int, default=10, help="--concurrency of each worker (default 10)")
    p.add_argument("--body", choices=("async", "sync"), default="async",
                   help="the no-op task as an async handler or a plain def run in threads (bench/tasks.py)")
    p.add_argument("--latency-samples", type=int, default=200)
    p.add_argument("--http-requests", type=int, default=2000)
    p.add_argument("--http-clients", type=int, default=16)
    p.add_argument("--redelivery-runs", type=int, default=3)
    p.add_argument("--skip", default="",
                   help="comma-separated: drain,limits,history,latency,redelivery,http,others")
    p.add_argument("--compare", type=Path, default=None,
                   help="another dtq tree (e.g. an unpacked `git archive`); its drain and latency run "
                        "interleaved with this tree's and are reported as ratios")
    p.add_argument("--results-dir", type=Path, default=RESULTS)
    p.add_argument("--name", default="dtq", help="results file stem (default dtq)")
    return p.parse_args(argv)


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def run_drains(rigs: dict[str, b.Rig], args: argparse.Namespace) -> dict[str, Any]:
    counts = [int(w) for w in args.workers.split(",") if w]
    runs: dict[str, list[dict[str, Any]]] = {}
    for round_no in range(args.rounds):
        for tree, rig in rigs.items():
            for workers in counts:
                if tree == "no-history" and workers != 1:
                    continue  # history's cost, measured with one worker (bench.no_history)
                label = f"{tree}/{workers}w"
                r = b.drain(rig, tasks=args.tasks, workers=workers, concurrency=args.concurrency)
                runs.setdefault(label, []).append(r)
                _log_drain(round_no, label, r)
                if tree != "current" or workers != 1 or "limits" in args.skip.split(","):
                    continue
                # Issue 22: the same drain with a limit that never binds, side by side in each round.
                for name, limits in b.NON_BINDING_LIMITS.items():
                    label = f"{tree}/{workers}w+{name}"
                    r = b.drain(rig, tasks=args.tasks, workers=workers, concurrency=args.concurrency,
                                limits=limits)
                    runs.setdefault(label, []).append(r)
                    _log_drain(round_no, label, r)
    return _summary(runs)


def _log_drain(round_no: int, label: str, r: dict[str, Any]) -> None:
    log(f"round {round_no + 1}: {label} drained {r['drain_per_s']:,.0f} tasks/s, "
        f"{r['round_trips_per_task']:.3f} round trips/task, worker CPU {r['worker_cpu_us_per_task']:.0f} "
        f"µs/task, Redis CPU {r['redis_cpu_us_per_task']:.0f} µs/task, rss {r['peak_rss_mb']} MB")
    log(f"round {round_no + 1}: {label} Redis per task: {r['queue_commands_per_task']:.2f} commands "
        f"({', '.join(r['top_commands'])}); enqueue 1-by-1 {fmt(r['enqueue_redis_commands_per_task'])} "
        f"commands, {fmt(r['enqueue_redis_cpu_us_per_task'])} µs CPU "
        f"({', '.join(r['enqueue_top_commands'])})")
    log(f"round {round_no + 1}: {label} Redis CPU µs per task: scripts {r['script_us_per_task']:.1f} "
        f"(inside them: {', '.join(r['top_script_usec'])}), bodies' INCRBY {r['body_us_per_task']:.1f}, "
        f"the rest {r['redis_cpu_us_per_task'] - r['script_us_per_task'] - r['body_us_per_task']:.1f}")


def _summary(runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    summary = {}
    for label, rs in runs.items():
        summary[label] = {key: median([r[key] for r in rs]) for key in rs[0] if isinstance(rs[0][key], (int, float))}
        summary[label]["runs_drain_per_s"] = [round(r["drain_per_s"]) for r in rs]
        summary[label]["round_trips"] = rs[-1]["round_trips"]
        summary[label]["top_commands"] = rs[-1]["top_commands"]
        summary[label]["enqueue_top_commands"] = rs[-1]["enqueue_top_commands"]
        summary[label]["enqueue_tree"] = rs[-1].get("enqueue_tree")  # whose engine enqueued (prefill)
        summary[label]["top_script_usec"] = rs[-1].get("top_script_usec", [])
    return summary


def run_latency(rigs: dict[str, b.Rig], args: argparse.Namespace) -> dict[str, Any]:
    """dtq's idle latency, interleaved with the floor of its stack (bench.floor: a bare BLPOP -> INCR
    worker on redis-py's asyncio client, and on the blocking one) on the same Redis."""
    out: dict[str, list[dict[str, Any]]] = {}
    for _ in range(2):
        for tree, rig in rigs.items():
            if tree == "no-history":
                continue  # its drain says what history costs; latency would only add minutes
            r = b.latency(rig, samples=args.latency_samples)
            out.setdefault(tree, []).append(r)
            log(f"{tree}: latency to the body p50 {r['body_p50_ms']:.2f} ms, to task.succeeded p50 "
                f"{r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms")
        for mode in ("async", "sync"):
            r = b.latency_floor(rigs["current"], mode, samples=args.latency_samples)
            out.setdefault(f"floor ({mode})", []).append(r)
            log(f"floor ({mode}): latency to the body p50 {r['body_p50_ms']:.2f} ms")
    return {tree: {k: _median_of(rs, k) for k in rs[0]} for tree, rs in out.items()}


def _median_of(runs: list[dict[str, Any]], key: str) -> Any:
    """The median of a numeric field (ints stay ints, e.g. sample counts); other fields as is."""
    first = runs[0][key]
    if isinstance(first, bool) or not isinstance(first, (int, float)):
        return first
    value = median([r[key] for r in runs])
    return int(value) if isinstance(first, int) and value is not None else value


def run_others(args: argparse.Namespace) -> dict[str, Any]:
    """Run the DLQ and console benchmarks (other modules) when they exist, bounded in time."""
    out: dict[str, Any] = {}
    for name in OTHER_BENCHES:
        if importlib.util.find_spec(f"bench.{name}") is None:
            out[name] = "not present"
            continue
        log(f"running bench.{name}")
        try:
            proc = subprocess.run([sys.executable, "-m", f"bench.{name}"], cwd=ROOT, capture_output=True, text=True,
                                  timeout=300)
            out[name] = {"exit": proc.returncode, "output": proc.stdout.strip().splitlines()[-30:]}
            if proc.returncode:
                out[name]["stderr"] = proc.stderr.strip().splitlines()[-10:]
        except subprocess.TimeoutExpired:
            out[name] = "timed out after 300 s"
        print("\n".join(out[name]["output"]) if isinstance(out[name], dict) else out[name], flush=True)
    return out


def report(data: dict[str, Any]) -> str:
    lines = [f"## dtq benchmark ({data['finished_at']})", "",
             f"Machine: {data['machine']['cpu']}, {data['machine']['cores']} cores, "
             f"{data['machine']['memory_gb']} GB, {data['machine']['os']}, Python {data['machine']['python']}, "
             f"Redis {data['machine']['redis']}; load average at start {data['machine']['load_avg_at_start']}.", ""]
    drains = data.get("drain", {})
    if drains:
        base = drains.get("current/1w", {}).get("drain_per_s")
        rows = [{"config": label, **v, "ratio": ratio(v.get("drain_per_s"), base),
                 "vs_current": ratio(v.get("drain_per_s"), drains.get(f"current/{label.split('/', 1)[1]}", {})
                                     .get("drain_per_s")) if not label.startswith("current/") else None,
                 "runs": " / ".join(f"{r:,}" for r in v.get("runs_drain_per_s", []))} for label, v in drains.items()]
        lines += [f"Drain of {data['args']['tasks']:,} pre-filled no-op tasks (median of {data['args']['rounds']} "
                  "interleaved runs; `tree/Nw` = N worker processes):", "",
                  markdown_table([("config", "config"), ("drain_per_s", "tasks/s"), ("runs", "each run"),
                                  ("ratio", "× 1 worker"), ("vs_current", "× current, same workers"),
                                  ("round_trips_per_task", "round trips/task"),
                                  ("hot_path_round_trips_per_task", "hot-path round trips/task"),
                                  ("redis_commands_per_task", "Redis commands/task"),
                                  ("worker_cpu_us_per_task", "worker CPU µs/task"),
                                  ("redis_cpu_us_per_task", "Redis CPU µs/task"),
                                  ("peak_rss_mb", "worker peak RSS MB"),
                                  ("enqueue_single_per_s", "enqueue 1-by-1/s"),
                                  ("enqueue_bulk_per_s", "enqueue bulk/s")], rows), ""]
        lines += ["Redis work per task (INFO commandstats and used_cpu_user + used_cpu_sys deltas; commands "
                  "without the harness's polls and the bodies' INCRs, CPU with everything; one Redis core "
                  "sustains about 1e6 / CPU µs per task):", "",
                  markdown_table([("config", "config"), ("queue_commands_per_task", "drain commands/task"),
                                  ("redis_cpu_us_per_task", "drain CPU µs/task"),
                                  ("core_tasks_per_s", "tasks/s per Redis core"),
                                  ("script_us_per_task", "of it in scripts µs/task"),
                                  ("body_us_per_task", "bodies' INCRBY µs/task"),
                                  ("script_top", "inside scripts (µs/task)"),
                                  ("top", "top commands (per task)"),
                                  ("enqueue_redis_commands_per_task", "enqueue 1-by-1 commands/task"),
                                  ("enqueue_redis_cpu_us_per_task", "enqueue 1-by-1 CPU µs/task"),
                                  ("enqueue_top", "enqueue top commands")],
                                 [{"config": label, **v, "top": ", ".join(v.get("top_commands", [])),
                                   "enqueue_top": ", ".join(v.get("enqueue_top_commands", [])),
                                   "script_top": ", ".join(v.get("top_script_usec", [])),
                                   "core_tasks_per_s": 1e6 / v["redis_cpu_us_per_task"]
                                   if v.get("redis_cpu_us_per_task") else None}
                                  for label, v in drains.items()]), ""]
    with_history, without = drains.get("current/1w"), drains.get("no-history/1w")
    if with_history and without:
        lines += [f"Task history on the hot path (issue 24): the drain with history "
                  f"{ratio(with_history.get('drain_per_s'), without.get('drain_per_s'))} × the same tree without it; "
                  f"Redis commands per task {fmt(without.get('queue_commands_per_task'))} → "
                  f"{fmt(with_history.get('queue_commands_per_task'))}, Redis CPU µs per task "
                  f"{fmt(without.get('redis_cpu_us_per_task'))} → {fmt(with_history.get('redis_cpu_us_per_task'))}, "
                  f"round trips per task {fmt(without.get('round_trips_per_task'))} → "
                  f"{fmt(with_history.get('round_trips_per_task'))}.", ""]
    lat = data.get("latency", {})
    if lat:
        base = lat.get("current", {}).get("body_p50_ms")
        rows = [{"tree": t, **v, "ratio": ratio(v.get("body_p50_ms"), base)} for t, v in lat.items()]
        lines += ["End-to-end latency, sequential tasks on an idle worker (medians of 2 interleaved runs): from the "
                  "enqueue call to the body's INCR (keyspace notification) and to the task.succeeded event. "
                  "`floor` rows are bench.floor's bare BLPOP → INCR worker, no task record, on the same Redis: "
                  "what no worker on that client stack can beat on this machine.", "",
                  markdown_table([("tree", "worker"), ("samples", "samples"), ("body_p50_ms", "to body p50 ms"),
                                  ("body_p99_ms", "p99 ms"), ("p50_ms", "to task.succeeded p50 ms"),
                                  ("p99_ms", "p99 ms"), ("ratio", "body p50 × current")], rows), ""]
    red = data.get("redelivery")
    if red:
        lines += [f"Redelivery after SIGKILL (DTQ_VISIBILITY_TIMEOUT_S={red['visibility_timeout_s']:g}): median "
                  f"{fmt(red['median_s'])} s, max {fmt(red['max_s'])} s over {red['runs']} runs "
                  f"(target ≤ {fmt(red['target_s'])} s).", ""]
    http = data.get("http")
    if http:
        lines += [f"Submit over HTTP (daphne, POST /api/v1/tasks, {http['clients']} keep-alive clients, "
                  f"{http['requests']:,} requests): {fmt(http['submit_per_s'])} tasks/s, p50 "
                  f"{fmt(http['p50_ms'])} ms, p99 {fmt(http['p99_ms'])} ms.", ""]
    for name, other in data.get("others", {}).items():
        if isinstance(other, dict) and other.get("output"):
            lines += [f"`bench.{name}` (exit {other['exit']}):", "", "```", *other["output"], "```", ""]
        else:
            lines += [f"`bench.{name}`: {other}.", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    os.environ["DTQ_BENCH_BODY"] = args.body  # the workers inherit it (bench/tasks.py)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
    django.setup()
    skip = set(filter(None, args.skip.split(",")))
    data: dict[str, Any] = {"started_at": now_iso(), "machine": machine(),
                            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}}
    server = start_redis("dtq")
    try:
        rigs = {"current": b.Rig(server)}
        if args.compare:
            rigs["compare"] = b.Rig(server, root=args.compare.resolve())
        if "history" not in skip and "drain" not in skip:
            # The same tree without task history, drained beside it: what history costs (issue 24).
            rigs["no-history"] = b.Rig(server, root=no_history.tree())
        if "drain" not in skip:
            data["drain"] = run_drains(rigs, args)
        if "latency" not in skip:
            data["latency"] = run_latency(rigs, args)
        if "redelivery" not in skip:
            data["redelivery"] = b.redelivery(rigs["current"], runs=args.redelivery_runs)
            log(f"redelivery median {data['redelivery']['median_s']:.2f} s")
        if "http" not in skip:
            data["http"] = b.http_submit(rigs["current"], requests=args.http_requests, clients=args.http_clients)
            log(f"HTTP submit {data['http']['submit_per_s']:,.0f}/s")
    finally:
        server.stop()
    if "others" not in skip:
        data["others"] = run_others(args)
    data["finished_at"] = now_iso()
    markdown = report(data)
    print(markdown)
    json_path, md_path = write_results(args.name, data, markdown, directory=args.results_dir)
    log(f"wrote {json_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
