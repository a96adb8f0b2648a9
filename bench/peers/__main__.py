"""`make bench-peers`: dtq and its peers on one throwaway Redis, runs interleaved A B A B, medians.

Per system and configuration: enqueue rate (one by one, and bulk where the library has a bulk
API), drain rate of pre-filled no-op tasks by ONE worker process, end-to-end latency p50/p99 of
sequential tasks on an idle worker (enqueue -> the body's INCR, seen by a keyspace
notification), and the worker's peak RSS. Every figure is also given as a ratio to dtq.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from ..common import (
    RESULTS,
    ROOT,
    VAR,
    machine,
    markdown_table,
    median,
    now_iso,
    peak_rss_mb,
    ratio,
    start_redis,
    write_results,
)
from .systems import SYSTEMS, VENVS, System

KEY = "bench:count"


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def ensure_venvs() -> dict[str, str]:
    """Create each peer virtualenv from its pinned requirements on demand; return install errors."""
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


class Runner:
    def __init__(self, url: str) -> None:
        self.url = url
        self.client = redis.Redis.from_url(url)
        VAR.mkdir(parents=True, exist_ok=True)

    def env(self, system: System) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"BENCH_REDIS_URL": self.url, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1",
                    "DTQ_REDIS_URL": self.url, "DTQ_TASK_MODULES": "bench.tasks", "DTQ_LOG_LEVEL": "WARNING",
                    "DTQ_MAX_QUEUE_DEPTH": "0", "DJANGO_SETTINGS_MODULE": "dtq_site.settings", **system.env})
        return env

    def bin(self, system: System, script: str) -> str:
        if system.venv == "dtq":
            return sys.executable if script == "python" else str(Path(sys.executable).parent / script)
        return str(VENVS[system.venv][0] / "bin" / script)

    def driver(self, system: System, *args: str, timeout: float) -> dict[str, Any]:
        proc = subprocess.run([self.bin(system, "python"), "-m", "bench.peers.driver", system.module, *args,
                               "--key", KEY], cwd=ROOT, env=self.env(system), capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode:
            raise RuntimeError(f"driver failed: {proc.stderr.strip().splitlines()[-1:] or proc.returncode}")
        return dict(json.loads(proc.stdout.strip().splitlines()[-1]))

    def start_worker(self, system: System, *, burst: bool) -> subprocess.Popen[bytes]:
        argv = [a.replace("{url}", self.url) for a in system.argv]
        argv[0] = self.bin(system, argv[0])
        if burst:
            argv += list(system.burst_flag)
        log_file = open(VAR / f"peer-{system.name}-{system.config}.log", "ab")  # noqa: SIM115 - child owns it
        proc = subprocess.Popen(argv, cwd=ROOT, env=self.env(system), stdout=log_file, stderr=subprocess.STDOUT,
                                start_new_session=True)
        log_file.close()
        return proc

    @staticmethod
    def stop(proc: subprocess.Popen[bytes]) -> None:
        """Stop the worker and every process it started (its own session), by its process group."""
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(10)
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
        self.client.flushall()
        out = self.driver(system, "enqueue", "--n", str(n), "--single", str(min(2000, n)), timeout=300)
        proc = self.start_worker(system, burst=True)
        try:
            rss, polls, first, last = None, 0, None, (-1, time.monotonic())
            while True:
                value = self.count()
                now = time.perf_counter()
                if first is None and value > 0:
                    first = (now, value)
                if value != last[0]:
                    last = (value, time.monotonic())
                if value >= n:
                    break
                if polls % 50 == 0:
                    rss = peak_rss_mb(proc.pid) or rss
                if time.monotonic() - last[1] > 30 or (proc.poll() is not None and value < n):  # stuck
                    raise RuntimeError(f"{system.label}: {value} of {n} tasks ran (worker exit {proc.poll()})")
                polls += 1
                time.sleep(0.002)
            rss = peak_rss_mb(proc.pid) or rss
            assert first is not None
            out.update({"tasks": n, "drain_per_s": (n - first[1]) / (now - first[0]) if now > first[0] else None,
                        "peak_rss_mb": rss})
            return out
        finally:
            self.stop(proc)

    def latency(self, system: System, samples: int) -> dict[str, Any]:
        self.client.flushall()
        self.client.config_set("notify-keyspace-events", "K$")
        proc = self.start_worker(system, burst=False)
        try:
            return self.driver(system, "latency", "--samples", str(samples), "--warmup", "10", timeout=180)
        finally:
            self.stop(proc)
            self.client.config_set("notify-keyspace-events", "")


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.peers", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=20000,
                   help="tasks pre-filled per drain (default 20000, as issue 8 asks)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved drain rounds (default 3)")
    p.add_argument("--latency-rounds", type=int, default=3,
                   help="interleaved latency rounds after the drain rounds; medians are reported (default 3)")
    p.add_argument("--latency-samples", type=int, default=100)
    p.add_argument("--only", default="", help="comma-separated system names (dtq is always included)")
    p.add_argument("--budget-s", type=float, default=600,
                   help="start no new drain round after this many seconds (default 600)")
    p.add_argument("--results-dir", type=Path, default=RESULTS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    started = time.monotonic()
    only = set(filter(None, args.only.split(","))) | {"dtq"} if args.only else None
    systems = [s for s in SYSTEMS if only is None or s.name in only]
    data: dict[str, Any] = {"started_at": now_iso(), "machine": machine(),
                            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                            "install_errors": ensure_venvs(), "failures": {}, "runs": {}}
    systems = [s for s in systems if s.venv == "dtq" or s.venv not in data["install_errors"]]
    server = start_redis("peers")
    runner = Runner(server.url)
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {s.label: {"drain": [], "latency": []} for s in systems}
    skipped_rounds = 0
    try:
        for round_no in range(args.rounds + args.latency_rounds):
            phase = "drain" if round_no < args.rounds else "latency"
            if phase == "drain" and round_no > 0 and time.monotonic() - started > args.budget_s:
                skipped_rounds += 1
                continue
            for system in systems:
                if system.label in data["failures"]:
                    continue
                try:
                    if phase == "drain":
                        r = runner.drain(system, args.tasks)
                        log(f"{phase} round {round_no + 1}: {system.label}: {r['drain_per_s']:,.0f} tasks/s, "
                            f"enqueue {r['enqueue_single_per_s']:,.0f}/s, rss {r['peak_rss_mb']} MB")
                    else:
                        r = runner.latency(system, args.latency_samples)
                        log(f"latency: {system.label}: p50 {r['p50_ms']:.2f} ms p99 {r['p99_ms']:.2f} ms")
                    runs[system.label][phase].append(r)
                except Exception as exc:  # noqa: BLE001 - a peer that fails is reported, not faked
                    data["failures"][system.label] = f"{type(exc).__name__}: {exc}"
                    log(f"{system.label} failed: {exc}")
    finally:
        server.stop()
    data["runs"] = runs
    data["skipped_rounds_for_time"] = skipped_rounds
    data["results"] = summarise(systems, runs)
    data["finished_at"] = now_iso()
    data["elapsed_s"] = round(time.monotonic() - started)
    markdown = report(data, systems)
    print(markdown)
    json_path, md_path = write_results("peers", data, markdown, directory=args.results_dir)
    log(f"wrote {json_path} and {md_path}")
    return 0


def summarise(systems: list[System], runs: dict[str, dict[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    rows = []
    for s in systems:
        d, lat = runs[s.label]["drain"], runs[s.label]["latency"]
        row: dict[str, Any] = {"system": s.name, "config": s.config, "note": s.note, "label": s.label,
                               "tasks": d[0]["tasks"] if d else None, "runs": len(d)}
        for key in ("drain_per_s", "enqueue_single_per_s", "enqueue_bulk_per_s", "peak_rss_mb"):
            row[key] = median([r[key] for r in d if r.get(key) is not None])
        for key in ("p50_ms", "p99_ms"):
            row[key] = median([r[key] for r in lat])
        # Every round's p50, so the table shows how far one round can stray from the median.
        row["p50_rounds"] = " / ".join(f"{r['p50_ms']:.2f}" for r in lat) or None
        rows.append(row)
    base = next((r for r in rows if r["system"] == "dtq" and r["config"] == "default"), {})
    for row in rows:
        for key in ("drain_per_s", "enqueue_single_per_s", "enqueue_bulk_per_s", "p50_ms", "p99_ms", "peak_rss_mb"):
            row[f"{key}_x_dtq"] = ratio(row.get(key), base.get(key))
    return rows


def report(data: dict[str, Any], systems: list[System]) -> str:
    m = data["machine"]
    a = data["args"]
    lines = [f"## dtq and its peers ({data['finished_at']}, {data['elapsed_s']} s)", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB, {m['os']}, Python {m['python']}, "
             f"Redis {m['redis']} (one throwaway server for all); load average at start {m['load_avg_at_start']}.",
             f"Drain: {a['tasks']:,} pre-filled no-op tasks (body: one INCR) per run, one worker process, median of "
             f"{a['rounds']} interleaved rounds; latency: median of {a['latency_rounds']} interleaved rounds of up to "
             f"{a['latency_samples']} sequential tasks on an idle worker (at least 20, at most about 10 s per round), "
             "enqueue → body ran (keyspace notification). `× dtq` is the ratio to dtq (default).", ""]
    cols = [("label", "system"), ("drain_per_s", "drain tasks/s"), ("drain_per_s_x_dtq", "× dtq"),
            ("enqueue_single_per_s", "enqueue 1-by-1/s"), ("enqueue_single_per_s_x_dtq", "× dtq"),
            ("enqueue_bulk_per_s", "enqueue bulk/s"), ("p50_ms", "p50 ms"), ("p50_ms_x_dtq", "× dtq"),
            ("p50_rounds", "p50 per round"),
            ("p99_ms", "p99 ms"), ("peak_rss_mb", "worker RSS MB"), ("note", "configuration")]
    lines.append(markdown_table(cols, data["results"]))
    capped = [r for r in data["results"] if r["tasks"] and r["tasks"] < int(a["tasks"])]
    for r in capped:
        lines.append(f"\n{r['label']} drained {r['tasks']:,} tasks per run instead (too slow for the full drain).")
    for label, error in data["failures"].items():
        lines.append(f"\n{label}: not measured ({error}).")
    for venv, error in data["install_errors"].items():
        lines.append(f"\n{venv}: could not be installed ({error}).")
    if data["skipped_rounds_for_time"]:
        lines.append(f"\n{data['skipped_rounds_for_time']} round(s) skipped to stay within the time budget.")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
