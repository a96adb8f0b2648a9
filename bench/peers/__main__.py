"""`make bench-peers`: dtq and its peers on one throwaway Redis, runs interleaved A B A B, medians.

Two tables, one per task body: SYNC (a plain function doing one blocking INCR with redis-py) and
ASYNC (a coroutine awaiting one INCR with redis-py's asyncio client); the same body code and
client settings for everyone (bench/peers/apps/body.py). Per system: enqueue rate (one by one,
and bulk where the library has a bulk API); drain rate of pre-filled tasks by ONE normal,
long-lived worker process (no burst mode for anyone), from the first body's INCR to the last one's,
by polling the counter, the worker stopped by SIGTERM afterwards; the Redis commands executed and
the Redis CPU (used_cpu_user + used_cpu_sys) per task in that window, from INFO commandstats and
INFO cpu; end-to-end latency of sequential tasks on an idle worker (enqueue call -> the body's
INCR, seen by a keyspace notification), p50/p99 of all samples of all rounds; peak RSS; Redis
memory per queued task (Redis's own count of its keys after the pre-fill, MEMORY STATS' dataset
and key tables as in bench.bench_memory, less the empty server's).

`--payload-bytes N` gives every task a second argument of N characters (bench/peers/apps/body.py),
which every system stores, reads back and hands to the task: the benchmark's own bodies are a
counter key, where real tasks carry ids, addresses, a few hundred bytes of JSON. `--redis-config
NAME=VALUE` starts the benchmark's Redis with a setting (e.g. dtq's recommended
`hash-max-listpack-value=1024`, docs/deployment.md); both are stated in the report's header.

`--explore` drains every configuration of systems.candidates() instead and reports the fastest
per system and body: the winners are then fixed in systems.SYSTEMS.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import redis

from ..bench_memory import keyspace_bytes
from ..common import (
    RESULTS,
    ROOT,
    VAR,
    RedisServer,
    apply_redis_settings,
    depth_cap_for,
    machine,
    markdown_table,
    median,
    now_iso,
    peak_rss_mb,
    percentile,
    redis_setting,
    write_results,
)
from .systems import BODIES, SYNC_ONLY, SYSTEMS, VENVS, System, candidates

KEY = "bench:count"
PORT = 16399  # the benchmark's own redis-server (never a user's 6379); --port to change
POLL_S = 0.002


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def ensure_venvs() -> dict[str, str]:
    """Create each peer virtualenv from its pinned requirements (PyPI) on demand; return install errors."""
    errors: dict[str, str] = {}
    for name, (venv, requirements) in VENVS.items():
        stamp = venv / ".installed"
        if stamp.exists() and stamp.read_text() == requirements.read_text():
            continue
        log(f"installing {requirements.name} into {venv.relative_to(ROOT)}")
        try:
            if not (venv / "bin" / "python").exists():
                subprocess.run(["python3", "-m", "venv", str(venv)], check=True, capture_output=True, timeout=300)
            subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", "-r",
                            str(requirements)], check=True, capture_output=True, text=True, timeout=900)
            stamp.write_text(requirements.read_text())
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as exc:
            detail = getattr(exc, "stderr", "") or str(exc)
            errors[name] = str(detail).strip().splitlines()[-1] if str(detail).strip() else repr(exc)
            log(f"cannot install {name}: {errors[name]}")
    return errors


def redis_counters(client: redis.Redis) -> tuple[dict[str, int], float]:
    """Calls per command (commands run inside scripts included) and Redis CPU seconds so far."""
    stats = client.info("commandstats")
    cpu = client.info("cpu")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return calls, float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])


def redis_work(before: tuple[dict[str, int], float], after: tuple[dict[str, int], float], own_gets: int,
               tasks: int) -> dict[str, Any]:
    """Per task: Redis commands executed and Redis CPU µs between two counter snapshots, less the
    benchmark's own commands (its INFO calls, and the GETs that poll the counter)."""
    delta = {c: after[0].get(c, 0) - before[0].get(c, 0) for c in after[0]}
    delta.pop("info", None)
    delta["get"] = delta.get("get", 0) - own_gets
    delta = {c: n for c, n in delta.items() if n > 0}
    return {"redis_commands_per_task": sum(delta.values()) / tasks,
            "redis_cpu_us_per_task": (after[1] - before[1]) * 1e6 / tasks,
            "redis_commands": {c: round(n / tasks, 3) for c, n in sorted(delta.items(), key=lambda kv: -kv[1])}}


class Runner:
    def __init__(self, url: str, tasks: int = 0, payload_bytes: int = 0) -> None:
        self.url = url
        self.payload_bytes = payload_bytes
        self.warmed: set[str] = set()  # apps (bench.peers.apps modules) whose scripts this Redis holds
        # dtq at its defaults, the depth gate included (every submit checks it).
        cap = depth_cap_for(tasks)
        self.dtq_settings = {} if cap is None else {"DTQ_MAX_QUEUE_DEPTH": str(cap)}
        self.client = redis.Redis.from_url(url)
        VAR.mkdir(parents=True, exist_ok=True)

    def env(self, system: System) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"BENCH_REDIS_URL": self.url, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
                    "DTQ_REDIS_URL": self.url, "DTQ_TASK_MODULES": "bench.peers.apps.dtq_app",
                    "DTQ_LOG_LEVEL": "WARNING", **self.dtq_settings,
                    "BENCH_PAYLOAD_BYTES": str(self.payload_bytes),
                    "DJANGO_SETTINGS_MODULE": "dtq_site.settings", **dict(system.env)})
        return env

    def bin(self, system: System, script: str) -> str:
        if system.venv == "dtq":
            return sys.executable if script == "python" else str(Path(sys.executable).parent / script)
        return str(VENVS[system.venv][0] / "bin" / script)

    def driver(self, system: System, *args: str, timeout: float) -> dict[str, Any]:
        proc = subprocess.run([self.bin(system, "python"), "-m", "bench.peers.driver", system.module, *args,
                               "--key", KEY, "--body", system.body], cwd=ROOT, env=self.env(system),
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"driver failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))

    def start_worker(self, system: System) -> subprocess.Popen[bytes]:
        argv = [a.replace("{url}", self.url) for a in system.argv]
        argv[0] = self.bin(system, argv[0])
        log_file = open(VAR / f"peer-{system.name}-{system.body}.log", "ab")  # noqa: SIM115 - child owns it
        proc = subprocess.Popen(argv, cwd=ROOT, env=self.env(system), stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log_file.close()
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        """SIGTERM the worker and every process it started (its own session), as an operator would."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(5)  # the figures are taken: a slow graceful exit only costs wall time
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
            except ProcessLookupError:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # leftovers of a pool, if any
        except (ProcessLookupError, PermissionError):
            pass

    def count(self) -> int:
        return int(self.client.get(KEY) or 0)

    def drain(self, system: System, tasks: int) -> dict[str, Any]:
        n = min(tasks, system.max_tasks or tasks)
        if system.module not in self.warmed:
            # A library's first enqueue loads its scripts into Redis (dtq's library: about 0.5 MB),
            # which FLUSHALL keeps: paid here, not by its first round's memory per task.
            self.client.flushall()
            self.driver(system, "enqueue", "--n", "10", "--single", "10", timeout=120)
            self.warmed.add(system.module)
        self.client.flushall()
        empty = keyspace_bytes(self.client)
        out = self.driver(system, "enqueue", "--n", str(n), "--single", str(min(2000, n // 2)), timeout=300)
        out["queued_bytes_per_task"] = (keyspace_bytes(self.client) - empty) / n
        proc = self.start_worker(system)
        try:
            rss, polls, gets = None, 0, 0
            first: tuple[float, int] | None = None
            before: tuple[dict[str, int], float] | None = None
            last = (-1, time.monotonic())
            while True:
                value = self.count()
                now = time.perf_counter()
                gets += 1
                if first is None and value > 0:
                    first, before, gets = (now, value), redis_counters(self.client), 0
                if value != last[0]:
                    last = (value, time.monotonic())
                if value >= n:
                    break
                if polls % 50 == 0:
                    rss = peak_rss_mb(proc.pid) or rss
                if time.monotonic() - last[1] > 30 or (proc.poll() is not None and value < n):  # stuck
                    raise RuntimeError(f"{system.label}: {value} of {n} tasks ran (worker exit {proc.poll()})")
                polls += 1
                time.sleep(POLL_S)
            after = redis_counters(self.client)
            rss = peak_rss_mb(proc.pid) or rss
            assert first is not None and before is not None
            timed = n - first[1]
            out.update({"tasks": n, "drain_per_s": timed / (now - first[0]) if timed and now > first[0] else None,
                        "peak_rss_mb": rss})
            if timed:
                out.update(redis_work(before, after, gets, timed))
        finally:
            self.stop(proc)
        # Bodies run more than once (a redelivery: at-least-once systems may) are reported, not hidden.
        out["extra_runs"] = self.count() - n
        return out

    def latency(self, system: System, samples: int) -> dict[str, Any]:
        self.client.flushall()
        self.client.config_set("notify-keyspace-events", "K$")
        proc = self.start_worker(system)
        try:
            return self.driver(system, "latency", "--samples", str(samples), "--warmup", "10",
                               timeout=max(180, samples * 0.1))
        finally:
            self.stop(proc)
            self.client.config_set("notify-keyspace-events", "")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=20000, help="tasks pre-filled per drain (default 20000)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved drain rounds (default 3)")
    p.add_argument("--latency-rounds", type=int, default=3,
                   help="interleaved latency rounds after the drain rounds (default 3)")
    p.add_argument("--latency-samples", type=int, default=1000,
                   help="latency samples per system, split over the rounds and pooled (default 1000)")
    p.add_argument("--only", default="", help="comma-separated system names (dtq is always included)")
    p.add_argument("--body", choices=["sync", "async", "both"], default="both")
    p.add_argument("--budget-s", type=float, default=660,
                   help="start no new drain round after this many seconds (default 660)")
    p.add_argument("--port", type=int, default=PORT, help=f"the benchmark redis-server's port (default {PORT})")
    p.add_argument("--quick", action="store_true",
                   help="a smoke run of about 2 minutes: 2,000 tasks, 1 drain round, 1 round of 200 latency samples")
    p.add_argument("--explore", action="store_true",
                   help="drain every candidate configuration (no latency) and report the fastest per system")
    p.add_argument("--payload-bytes", type=int, default=0,
                   help="give every task a second argument of this many characters (default 0: none)")
    p.add_argument("--redis-config", action="append", default=[], metavar="NAME=VALUE", type=redis_setting,
                   help="a redis-server setting for the benchmark's Redis (repeatable), e.g. "
                        "hash-max-listpack-value=1024")
    p.add_argument("--results-dir", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    if args.payload_bytes < 0:
        p.error("--payload-bytes must be 0 or more")
    if args.quick:
        args.tasks, args.rounds, args.latency_rounds, args.latency_samples = 2000, 1, 1, 200
    if args.explore:
        args.latency_rounds = 0
    return args


def start_redis(port: int, config: Sequence[str] = ()) -> RedisServer:
    try:
        redis.Redis(port=port, socket_connect_timeout=0.5).ping()
    except redis.ConnectionError:
        pass
    else:
        raise SystemExit(f"port {port} is taken by another Redis: pick a free one with --port")
    server = RedisServer(VAR / f"redis-peers-{os.getpid()}", appendonly=False, port=port).start()
    try:  # CONFIG SET, not the command line: a setting Redis does not know gets its own message
        apply_redis_settings(redis.Redis(port=port), config)
    except SystemExit:
        server.stop()
        raise
    return server


def _exit_on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)  # so the finally blocks stop the worker and the redis-server


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    started = time.monotonic()
    only = set(filter(None, args.only.split(","))) | {"dtq"} if args.only else None
    pool = candidates() if args.explore else list(SYSTEMS)
    systems = [s for s in pool if (only is None or s.name in only or s.name.split("-")[0] in only)
               and args.body in ("both", s.body)]
    name = "peers-explore" if args.explore else "peers"
    data: dict[str, Any] = {"started_at": now_iso(), "machine": machine(), "mode": "explore" if args.explore else "run",
                            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                            "install_errors": ensure_venvs(), "failures": {}, "runs": {}}
    systems = [s for s in systems if s.venv == "dtq" or s.venv not in data["install_errors"]]
    server = start_redis(args.port, args.redis_config)
    runner = Runner(server.url, args.tasks, args.payload_bytes)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s.key: {"drain": [], "latency": []} for s in systems}
    per_round = math.ceil(args.latency_samples / args.latency_rounds) if args.latency_rounds else 0
    skipped_rounds = 0
    try:
        for round_no in range(args.rounds + args.latency_rounds):
            phase = "drain" if round_no < args.rounds else "latency"
            if phase == "drain" and round_no > 0 and time.monotonic() - started > args.budget_s:
                skipped_rounds += 1
                continue
            for system in systems:
                if system.key in data["failures"]:
                    continue
                try:
                    if phase == "drain":
                        r = runner.drain(system, args.tasks)
                        log(f"drain round {round_no + 1}: {system.key}: {r['drain_per_s']:,.0f} tasks/s, "
                            f"{r.get('redis_commands_per_task', 0):.1f} cmds/task, "
                            f"{r.get('redis_cpu_us_per_task', 0):.1f} µs Redis CPU/task, "
                            f"enqueue {r['enqueue_single_per_s']:,.0f}/s, rss {r['peak_rss_mb']} MB")
                    else:
                        r = runner.latency(system, per_round)
                        log(f"latency: {system.key}: p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms "
                            f"({r['samples']} samples)")
                    runs[system.key][phase].append(r)
                except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not faked
                    data["failures"][system.key] = f"{type(exc).__name__}: {exc}"
                    log(f"{system.key} failed: {exc}")
    finally:
        server.stop()
    data["runs"] = runs
    data["skipped_rounds_for_time"] = skipped_rounds
    data["results"] = summarise(systems, runs)
    if args.explore:
        data["winners"] = winners(data["results"])
    data["finished_at"] = now_iso()
    data["elapsed_s"] = round(time.monotonic() - started)
    markdown = explore_report(data) if args.explore else report(data)
    print(markdown)
    json_path, md_path = write_results(name, data, markdown, directory=args.results_dir)
    log(f"wrote {json_path} and {md_path}")
    return 0


DRAIN_KEYS = ("drain_per_s", "enqueue_single_per_s", "enqueue_bulk_per_s", "peak_rss_mb", "redis_commands_per_task",
              "redis_cpu_us_per_task", "queued_bytes_per_task", "extra_runs")


def summarise(systems: list[System], runs: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """One row per system and body: drain figures are medians over the rounds; latency percentiles
    come from all samples of all rounds pooled (each round's p50 kept beside them)."""
    rows = []
    for s in systems:
        d, lat = runs[s.key]["drain"], runs[s.key]["latency"]
        row: dict[str, Any] = {"system": s.name, "config": s.config, "body": s.body, "note": s.note, "label": s.label,
                               "key": s.key, "tasks": d[0]["tasks"] if d else None, "runs": len(d)}
        for key in DRAIN_KEYS:
            row[key] = median([r[key] for r in d if r.get(key) is not None])
        row["drain_rounds"] = " / ".join(f"{r['drain_per_s']:,.0f}" for r in d if r.get("drain_per_s")) or None
        row["extra_runs"] = sum(r.get("extra_runs", 0) for r in d)  # over all rounds, not a median
        samples = [t for r in lat for t in r.get("times_ms", [])]
        if samples:
            row.update(samples=len(samples), p50_ms=percentile(samples, 50), p99_ms=percentile(samples, 99))
        else:  # rounds without raw samples: the median of their percentiles
            row.update(samples=sum(r.get("samples", 0) for r in lat) or None,
                       p50_ms=median([r["p50_ms"] for r in lat]), p99_ms=median([r["p99_ms"] for r in lat]))
        row["p50_rounds"] = " / ".join(f"{r['p50_ms']:.2f}" for r in lat) or None
        rows.append(row)
    for body in BODIES:
        table = [r for r in rows if r["body"] == body]
        peers = [r for r in table if r["system"] != "dtq"]
        fastest = max(peers, key=lambda r: r["drain_per_s"] or 0, default=None)
        quickest = min((r for r in peers if r["p50_ms"] is not None), key=lambda r: r["p50_ms"], default=None)
        for row in table:
            row["fastest_peer"] = fastest["label"] if fastest else None
            row["drain_x_fastest_peer"] = _ratio(row["drain_per_s"], fastest["drain_per_s"] if fastest else None)
            row["p50_x_best_peer"] = _ratio(row["p50_ms"], quickest["p50_ms"] if quickest else None)
    return rows


def _ratio(value: float | None, base: float | None) -> float | None:
    return value / base if value is not None and base else None


def winners(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Fastest configuration (median drain) per system and body."""
    best: dict[str, dict[str, Any]] = {}
    for row in rows:
        k = f"{row['body']}: {row['system']}"
        if row["drain_per_s"] and (k not in best or row["drain_per_s"] > best[k]["drain_per_s"]):
            best[k] = row
    return {k: f"{r['config']} ({r['note']}): {r['drain_per_s']:,.0f} tasks/s" for k, r in best.items()}


def _header(data: dict[str, Any]) -> list[str]:
    m, a = data["machine"], data["args"]
    payload = (f"Every task carries a second argument of {a['payload_bytes']:,} characters, which each system stores "
               "and hands to the body (`--payload-bytes`)." if a.get("payload_bytes")
               else "Tasks carry only the counter's key (no `--payload-bytes`).")
    settings = (f"The benchmark's Redis runs with {', '.join(f'`{c}`' for c in a['redis_config'])}."
                if a.get("redis_config") else "The benchmark's Redis runs at Redis's defaults.")
    return [f"{payload} {settings}", "",
            f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, {m['os']}, Python {m['python']}, "
            f"Redis {m['redis']} (one throwaway server for all, port {a['port']}); load average at "
            f"start {m['load_avg_at_start']}."]


def report(data: dict[str, Any]) -> str:
    a = data["args"]
    rounds = int(a["rounds"]) - data["skipped_rounds_for_time"]
    lines = [f"## dtq and its peers ({data['finished_at']}, {data['elapsed_s']} s)", "", *_header(data),
             f"Drain: {a['tasks']:,} pre-filled tasks per run, one normal worker process (stopped by SIGTERM "
             f"after), median of {rounds} interleaved round(s), timed from the first body's INCR to the last. "
             "Redis commands (the body's INCR included) and Redis CPU per task: INFO commandstats / INFO cpu deltas "
             f"over that window, less the benchmark's own polling. Latency: {a['latency_samples']:,} sequential "
             f"tasks on an idle worker in {a['latency_rounds']} interleaved rounds, enqueue call → body's INCR "
             "(keyspace notification), p50/p99 of all samples. `× fastest peer`: drain rate over the fastest "
             "peer's in the same table; `p50 × best peer`: p50 over the lowest peer p50.", ""]
    cols = [("label", "system"), ("drain_per_s", "drain tasks/s"), ("drain_x_fastest_peer", "× fastest peer"),
            ("drain_rounds", "drain per round"), ("enqueue_single_per_s", "enqueue 1-by-1/s"),
            ("enqueue_bulk_per_s", "enqueue bulk/s"), ("p50_ms", "p50 ms"), ("p50_x_best_peer", "p50 × best peer"),
            ("p99_ms", "p99 ms"), ("samples", "latency samples"), ("redis_commands_per_task", "Redis cmds/task"),
            ("redis_cpu_us_per_task", "Redis CPU µs/task"), ("queued_bytes_per_task", "Redis B/queued task"),
            ("peak_rss_mb", "worker RSS MB"), ("extra_runs", "bodies run twice"), ("note", "configuration")]
    for body in BODIES:
        rows = [r for r in data["results"] if r["body"] == body]
        if not rows:
            continue
        if body == "async":
            rows += [{"label": name, "note": "no async task bodies"} for name in SYNC_ONLY]
        title = ("SYNC body: a plain function, one blocking redis-py INCR" if body == "sync"
                 else "ASYNC body: a coroutine, one awaited redis-py asyncio INCR")
        lines += [f"### {title}", "", markdown_table(cols, rows), ""]
    capped = [r for r in data["results"] if r["tasks"] and r["tasks"] < int(a["tasks"])]
    for r in capped:
        lines.append(f"{r['key']} drained {r['tasks']:,} tasks per run instead (too slow for the full drain).\n")
    lines += _trailer(data)
    return "\n".join(lines)


def explore_report(data: dict[str, Any]) -> str:
    a = data["args"]
    lines = [f"## Exploration of peer configurations ({data['finished_at']}, {data['elapsed_s']} s)", "",
             *_header(data), f"Drain only: {a['tasks']:,} pre-filled tasks per run, one worker process, median of "
             f"{int(a['rounds']) - data['skipped_rounds_for_time']} interleaved round(s).", ""]
    cols = [("key", "body: system (configuration)"), ("drain_per_s", "drain tasks/s"),
            ("drain_rounds", "drain per round"), ("redis_commands_per_task", "Redis cmds/task"),
            ("redis_cpu_us_per_task", "Redis CPU µs/task"), ("extra_runs", "bodies run twice"),
            ("note", "configuration")]
    lines += [markdown_table(cols, data["results"]), "", "Fastest per system and body:", ""]
    lines += [f"- {k}: {v}" for k, v in data["winners"].items()]
    lines += ["", *_trailer(data)]
    return "\n".join(lines)


def _trailer(data: dict[str, Any]) -> list[str]:
    lines = [f"{key}: not measured ({error}).\n" for key, error in data["failures"].items()]
    lines += [f"{venv}: could not be installed ({error}).\n" for venv, error in data["install_errors"].items()]
    if data["skipped_rounds_for_time"]:
        lines.append(f"{data['skipped_rounds_for_time']} drain round(s) skipped to stay within the time budget.")
    return lines


if __name__ == "__main__":
    sys.exit(main())
