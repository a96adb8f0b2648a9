"""`python -m bench.bench_http`: HTTP submit against a bare Django JSON view, per server.

Each server runs one process on a throwaway Redis, serving bench.http_settings (dtq's settings
plus the bare views of bench.http_urls). wrk (Debian: apt-get install wrk) drives each endpoint
with the same load: `--clients` keep-alive connections, on loopback, in slices of `--seconds`
taken in turn across the endpoints (medians reported). Reported
per server: requests/s, tasks/s, p50 and p99 for the bare single view, POST /api/v1/tasks, the
bare batch view and POST /api/v1/tasks/batch, and submit as a share of its bare view.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from .common import VAR, free_port, median, start_redis, wait_until
from .dtq_bench import QUEUE, TASK, Rig, _health, _stop, new_prefix

BIN = Path(sys.executable).parent


def granian() -> list[str]:
    """granian's console script beside this Python, or its module (installed with --target)."""
    script = BIN / "granian"
    return [str(script)] if script.exists() else [sys.executable, "-m", "granian"]


def servers(port: int, threads: int) -> dict[str, list[str]]:
    """The candidate serving stacks, one process each, as argv."""
    py, host = sys.executable, "127.0.0.1"
    return {
        "daphne": [py, "-m", "daphne", "-b", host, "-p", str(port), "dtq_site.asgi:application"],
        "uvicorn": [py, "-m", "uvicorn", "dtq_site.asgi:application", "--host", host, "--port", str(port),
                    "--loop", "uvloop", "--http", "httptools", "--no-access-log", "--log-level", "warning"],
        "granian-asgi": [*granian(), "--interface", "asgi", "--host", host, "--port", str(port),
                         "--no-ws", "--log-level", "warning", "dtq_site.asgi:application"],
        "granian-wsgi": [*granian(), "--interface", "wsgi", "--host", host, "--port", str(port),
                         "--blocking-threads", str(threads), "--log-level", "warning", "dtq_site.wsgi:application"],
        "gunicorn-gthread": [str(BIN / "gunicorn"), "-k", "gthread", "-w", "1", "--threads", str(threads),
                             "-b", f"{host}:{port}", "--log-level", "warning", "dtq_site.wsgi:application"],
    }


WRK_SCRIPT = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = %s
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('RESULT {"requests":%%d,"duration_us":%%d,"p50_us":%%d,"p99_us":%%d,"non2xx":%%d,' ..
    '"socket_errors":%%d}\\n', summary.requests, summary.duration, latency:percentile(50),
    latency:percentile(99), e.status, e.connect + e.read + e.write + e.timeout))
end
"""


def tree_cpu_s(root: int) -> float:
    """CPU seconds (user + system) used so far by a process and its descendants (Linux /proc):
    the server's cost per request, which the load other processes put on a shared machine
    changes far less than the rate."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry)] = int(fields[1])
        times[int(entry)] = (int(fields[11]) + int(fields[12])) / tick
    total, stack = 0.0, [root]
    while stack:
        pid = stack.pop()
        total += times.get(pid, 0.0)
        stack.extend(child for child, parent in parents.items() if parent == pid)
    return total


def wrk(port: int, path: str, body: bytes, *, clients: int, seconds: int, tag: str, server_pid: int
        ) -> dict[str, Any]:
    script = VAR / f"wrk-{tag}.lua"
    script.write_text(WRK_SCRIPT % json.dumps(body.decode()))
    cpu_before = tree_cpu_s(server_pid)
    out = subprocess.run(["wrk", "-t1", f"-c{clients}", f"-d{seconds}s", "--timeout", "10s", "-s", str(script),
                          f"http://127.0.0.1:{port}{path}"], capture_output=True, text=True, timeout=seconds + 60,
                         check=True).stdout
    cpu_s = tree_cpu_s(server_pid) - cpu_before
    line = next(line for line in out.splitlines() if line.startswith("RESULT "))
    r = json.loads(line[len("RESULT "):])
    if r["non2xx"]:
        raise RuntimeError(f"{path}: {r['non2xx']} answers were not 2xx")
    # Requests past wrk's timeout are not counted as answered: a server that falls behind shows it.
    return {"per_s": r["requests"] / (r["duration_us"] / 1e6), "p50_ms": r["p50_us"] / 1000,
            "p99_ms": r["p99_us"] / 1000, "timeouts": r["socket_errors"],
            "server_cpu_us": cpu_s / max(r["requests"], 1) * 1e6}


def bodies(prefix: str, batch: int) -> dict[str, tuple[str, bytes, int]]:
    """endpoint -> (path, body, tasks per request)."""
    one = {"type": TASK, "payload": {"k": f"{prefix}:counter"}, "queue": QUEUE}
    many = json.dumps({"tasks": [one] * batch}).encode()
    single = json.dumps(one).encode()
    return {"bare": ("/bench/bare", single, 1), "submit": ("/api/v1/tasks", single, 1),
            "bare-batch": ("/bench/bare/batch", many, batch), "batch": ("/api/v1/tasks/batch", many, batch)}


def installed(name: str) -> bool:
    """Whether this environment has the server. uvicorn, granian and gunicorn are not in dtq's lock:
    to compare them without changing the environment, `pip install --target DIR "uvicorn[standard]"
    granian gunicorn`, remove from DIR what the environment already has, and run this with
    PYTHONPATH=DIR."""
    module = {"daphne": "daphne", "uvicorn": "uvicorn", "granian-asgi": "granian", "granian-wsgi": "granian",
              "gunicorn-gthread": "gunicorn"}[name]
    if importlib.util.find_spec(module) is None:
        print(f"skipping {name}: {module} is not installed", flush=True)
        return False
    return True


def measure(rig: Rig, name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One server (`name`, or `name@before`: served from the --compare tree) on every endpoint."""
    prefix, port = new_prefix(), free_port()
    server, _, tree = name.partition("@")
    root = args.compare if tree else rig.root
    argv = servers(port, args.threads)[server]
    log = open(VAR / f"{prefix}-{name}.log", "wb")  # noqa: SIM115 - the child owns it
    # The depth gate on, as by default, with a cap out of reach: the batch slices can submit more than
    # the default 100,000, and a 429 is not a submit (every submit checks the gate at the same cost).
    proc = subprocess.Popen(argv, cwd=root, env=rig.env(prefix, DJANGO_SETTINGS_MODULE="bench.http_settings",
                                                        DTQ_MAX_QUEUE_DEPTH=10**9),
                            stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_until(lambda: _health(port) or proc.poll() is not None, 30, interval=0.1, what=f"{name} start")
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited: see {VAR / f'{prefix}-{name}.log'}")
        # Each endpoint in short slices taken in turn, medians kept: on a shared machine the load
        # of the moment then weighs on the bare view and on submit alike.
        slices: dict[str, list[dict[str, Any]]] = {}
        endpoints = bodies(prefix, args.batch)
        for path, body, _ in endpoints.values():
            wrk(port, path, body, clients=args.clients, seconds=1, tag=prefix, server_pid=proc.pid)  # warm up
        for _ in range(args.slices):
            for endpoint, (path, body, tasks) in endpoints.items():
                r = wrk(port, path, body, clients=args.clients, seconds=args.seconds, tag=prefix, server_pid=proc.pid)
                slices.setdefault(endpoint, []).append({**r, "tasks_per_s": r["per_s"] * tasks,
                                                        "server_cpu_us_per_task": r["server_cpu_us"] / tasks})
        out: dict[str, Any] = {endpoint: {field: median([r[field] for r in rs]) for field in rs[0]}
                               for endpoint, rs in slices.items()}
        return out
    finally:
        _stop(proc, timeout=10)
        rig.cleanup(prefix)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.bench_http", description=__doc__.splitlines()[0])
    p.add_argument("--servers", default="daphne,uvicorn,granian-asgi,granian-wsgi,gunicorn-gthread")
    p.add_argument("--clients", type=int, default=16)
    p.add_argument("--seconds", type=int, default=2, help="length of one slice (default 2)")
    p.add_argument("--slices", type=int, default=5, help="slices per endpoint, taken in turn (default 5)")
    p.add_argument("--batch", type=int, default=100, help="tasks per batch request (default 100)")
    p.add_argument("--threads", type=int, default=8, help="request threads of the WSGI servers (default 8)")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--json", type=Path, default=None, help="also write the results here")
    p.add_argument("--compare", type=Path, default=None,
                   help="another dtq tree (e.g. an unpacked `git archive` of main): NAME@before in --servers "
                        "serves it (bench/http_settings.py and http_urls.py are copied in)")
    args = p.parse_args(argv)
    if shutil.which("wrk") is None:
        sys.stderr.write("bench_http needs wrk (Debian/Ubuntu: apt-get install wrk)\n")
        return 1
    names = [n for n in args.servers.split(",") if n and installed(n.partition("@")[0])]
    if args.compare is not None:
        for helper in ("http_settings.py", "http_urls.py"):
            shutil.copy(Path(__file__).parent / helper, args.compare / "bench" / helper)
    runs: dict[str, list[dict[str, Any]]] = {n: [] for n in names}
    server = start_redis("http")
    try:
        rig = Rig(server)
        for round_no in range(args.rounds):
            for name in names:
                runs[name].append(measure(rig, name, args))
                print(f"[{time.strftime('%H:%M:%S')}] round {round_no + 1} {name}: "
                      + ", ".join(f"{e} {r['tasks_per_s']:.0f} tasks/s p99 {r['p99_ms']:.1f} ms "
                                  f"cpu {r['server_cpu_us']:.0f} µs/req"
                                  for e, r in runs[name][-1].items()), flush=True)
    finally:
        server.stop()
    table = summarise(runs)
    print(table)
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1, default=str))
    return 0


def summarise(runs: dict[str, list[dict[str, Any]]]) -> str:
    rows = ["| server | bare req/s | submit req/s | submit ÷ bare | p50 / p99 ms | server CPU µs/req bare, submit "
            "| bare batch tasks/s | batch tasks/s | batch ÷ bare | p50 / p99 ms | server CPU µs/task bare, batch |",
            "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, results in runs.items():
        def med(endpoint: str, field: str, results: list[dict[str, Any]] = results) -> float:
            return float(median([r[endpoint][field] for r in results]))
        rows.append(
            f"| {name} | {med('bare', 'per_s'):.0f} | {med('submit', 'per_s'):.0f} "
            f"| {med('submit', 'per_s') / med('bare', 'per_s'):.2f} "
            f"| {med('submit', 'p50_ms'):.1f} / {med('submit', 'p99_ms'):.1f} "
            f"| {med('bare', 'server_cpu_us'):.0f}, {med('submit', 'server_cpu_us'):.0f} "
            f"| {med('bare-batch', 'tasks_per_s'):.0f} | {med('batch', 'tasks_per_s'):.0f} "
            f"| {med('batch', 'tasks_per_s') / med('bare-batch', 'tasks_per_s'):.2f} "
            f"| {med('batch', 'p50_ms'):.1f} / {med('batch', 'p99_ms'):.1f} "
            f"| {med('bare-batch', 'server_cpu_us_per_task'):.1f}, {med('batch', 'server_cpu_us_per_task'):.1f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
