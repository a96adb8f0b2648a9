"""Shared bench plumbing: a throwaway Redis, process memory, statistics, machine facts, result files."""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import redis

from dtq_core.config import DtqConfig
from tests.redis_server import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
VAR = ROOT / "var" / "bench"

__all__ = ["RedisServer", "free_port"]


def start_redis(name: str) -> RedisServer:
    """A throwaway, non-persistent redis-server on a free port (never a user's Redis)."""
    return RedisServer(VAR / f"redis-{name}-{os.getpid()}", appendonly=False).start()


def split_redis_setting(setting: str) -> tuple[str, str]:
    """"NAME=VALUE" as (name, value); ValueError for any other shape."""
    name, sep, value = setting.partition("=")
    if not sep or not name:
        raise ValueError(f"a Redis setting is NAME=VALUE, not {setting!r}")
    return name, value


def redis_setting(setting: str) -> str:
    """The argparse type of a benchmark's --redis-config / --config: a bad shape is a usage error
    (exit 2) before any Redis starts."""
    try:
        split_redis_setting(setting)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return setting


def apply_redis_settings(client: redis.Redis, settings: Sequence[str]) -> None:
    """CONFIG SET each "NAME=VALUE" (a benchmark's --redis-config / --config) on the benchmark's
    own Redis; a malformed one, or one Redis refuses, ends the run with Redis's message."""
    for setting in settings:
        try:
            name, value = split_redis_setting(setting)
        except ValueError as exc:
            raise SystemExit(str(exc)) from None
        try:
            client.config_set(name, value)
        except redis.ResponseError as exc:
            raise SystemExit(f"Redis setting {setting}: Redis refused it ({exc})") from None


def depth_cap_for(submits: int) -> int | None:
    """dtq's depth gate (DTQ_MAX_QUEUE_DEPTH) for a run that queues `submits` tasks without
    draining: None when the default cap holds them (dtq at its defaults), else a cap above them.
    Every submit checks the gate at the same cost whatever its cap; turning it off (0) would be a
    mode only dtq gets (docs/performance.md, "dtq at its defaults")."""
    return submits + 1 if submits >= DtqConfig().max_queue_depth else None


def median(values: Sequence[float]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def percentile(values: Sequence[float], pct: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(pct / 100 * len(ordered)) - 1)]


def wait_until(predicate: Callable[[], Any], timeout: float, interval: float = 0.005, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:g}s waiting for {what or predicate}")
        time.sleep(interval)


def _status_kb(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as fh:
                for child in fh.read().split():
                    out.append(int(child))
                    out.extend(descendants(int(child)))
    except OSError:
        pass
    return out


def peak_rss_mb(pid: int) -> float | None:
    """Peak RSS (VmHWM) of a process plus its descendants, in MB (an upper bound for pools)."""
    total = 0
    for p in [pid, *descendants(pid)]:
        total += _status_kb(p, "VmHWM") or 0
    return round(total / 1024, 1) if total else None


def commandstats(client: redis.Redis) -> dict[str, int]:
    """Calls per command since the server started (commands run inside scripts count too)."""
    info = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in info.items()}


def commandstats_usec(client: redis.Redis) -> dict[str, int]:
    """Microseconds spent executing each command since the server started (EVALSHA's includes the
    commands its scripts run, which count under their own names too)."""
    info = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in info.items()}


def server_totals(client: redis.Redis) -> dict[str, float]:
    stats, cpu = client.info("stats"), client.info("cpu")
    return {"commands": int(stats["total_commands_processed"]),
            "cpu_s": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])}


def machine() -> dict[str, Any]:
    """Describe where the numbers came from."""
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next((line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")), cpu)
    except OSError:
        pass
    try:
        version = subprocess.run(["redis-server", "--version"], capture_output=True, text=True, timeout=5).stdout
        version = next((part.split("=")[1] for part in version.split() if part.startswith("v=")), version.strip())
    except (OSError, subprocess.SubprocessError):
        version = "?"
    mem_kb = _meminfo_kb()
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem_kb / 1024 / 1024, 1) if mem_kb else None,
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "redis": version, "load_avg_at_start": [round(x, 2) for x in os.getloadavg()]}


def _meminfo_kb() -> int | None:
    try:
        with open("/proc/meminfo") as fh:
            return int(fh.readline().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def markdown_table(columns: Sequence[tuple[str, str]], rows: Sequence[dict[str, Any]]) -> str:
    """Render rows as a Markdown table; columns are (key, heading)."""
    lines = ["| " + " | ".join(h for _, h in columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join(fmt(row.get(key)) for key, _ in columns) + " |")
    return "\n".join(lines)


def fmt(value: Any) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        if value >= 100:
            return f"{value:,.0f}"
        if value >= 10:
            return f"{value:.1f}"
        return f"{value:.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def ratio(value: float | None, base: float | None) -> float | None:
    if value is None or not base:
        return None
    return round(value / base, 2)


def write_results(name: str, data: dict[str, Any], markdown: str, *, directory: Path = RESULTS
                  ) -> tuple[Path, Path]:
    """Write <name>-<stamp>.json plus <name>-latest.json/.md (bench/results/ unless told)."""
    directory.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    payload = json.dumps(data, indent=2, sort_keys=False, default=str)
    (directory / f"{name}-{stamp}.json").write_text(payload + "\n")
    latest_json = directory / f"{name}-latest.json"
    latest_json.write_text(payload + "\n")
    latest_md = directory / f"{name}-latest.md"
    latest_md.write_text(markdown + "\n")
    return latest_json, latest_md
