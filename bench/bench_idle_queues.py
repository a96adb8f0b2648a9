"""What an idle worker serving every queue costs Redis, with 1 and with 2,000 queues, and one task's
latency next to those queues: `python -m bench.bench_idle_queues [--root OTHER_TREE]`.

Real processes: a throwaway redis-server, one `manage.py runworker_dtq` (all queues, the defaults)
from this tree or --root. Queues are made the way junk submits leave them once their tasks ran
(registered, their partition opened: empty streams with their group). Once the worker has swept
every partition and waits on its wake subscription, the Redis commands and CPU of a window are
counted (INFO commandstats, INFO cpu), then tasks are submitted one at a time to a queue in the
middle and timed to SUCCEEDED.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine

from .common import ROOT, VAR, commandstats, server_totals, start_redis, wait_until

PREFIX = "idleq"


def measure(root: Path, queues: int, window_s: float, samples: int) -> dict[str, Any]:
    server = start_redis(f"idle-{queues}")
    worker: subprocess.Popen[bytes] | None = None
    try:
        client = redis.Redis.from_url(server.url, decode_responses=True)
        engine = Engine(DtqConfig(redis_url=server.url, key_prefix=PREFIX, max_queues=0))
        names = [f"junk-{n:05d}" for n in range(queues)]
        for name in names:
            engine.registry.ensure(name)
        env = {"DTQ_REDIS_URL": server.url, "DTQ_KEY_PREFIX": PREFIX, "DJANGO_SETTINGS_MODULE": "dtq_site.settings",
               "DTQ_LOG_LEVEL": "WARNING", "PYTHONUNBUFFERED": "1", "PATH": "/usr/bin:/bin"}
        VAR.mkdir(parents=True, exist_ok=True)
        log = open(VAR / f"idle-worker-{queues}.log", "wb")  # noqa: SIM115 - closed with the process
        worker = subprocess.Popen([sys.executable, "manage.py", "runworker_dtq", "--name", "idle"], cwd=root,
                                  env=env, stdout=log, stderr=subprocess.STDOUT)
        # Idle once it has swept every partition (three reads each) and the reaper has had a round.
        wait_until(lambda: commandstats(client).get("xreadgroup", 0) >= 3 * queues
                   and commandstats(client).get("xpending", 0) >= 1, timeout=120, what="the worker to go idle")
        client.config_resetstat()
        before = server_totals(client)
        time.sleep(window_s)  # the measurement window
        after = server_totals(client)
        stats = client.info("commandstats")
        calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
        usec = {name.removeprefix("cmdstat_"): int(v["usec"]) for name, v in stats.items()}
        latencies = []
        for _ in range(samples):
            started = time.perf_counter()
            task_id = engine.tasks.enqueue("dtq.echo", queue=names[len(names) // 2]).id
            wait_until(lambda: engine.client.hget(engine.keys.task(task_id), "status") == "SUCCEEDED",  # noqa: B023
                       timeout=30, interval=0.0005)
            latencies.append((time.perf_counter() - started) * 1000)
        per_s = {name: round(n / window_s, 1) for name, n in sorted(calls.items(), key=lambda kv: -kv[1])
                 if name not in ("config|resetstat", "info")}
        return {"queues": queues, "commands_per_s": round((after["commands"] - before["commands"]) / window_s, 1),
                "redis_cpu_ms_per_s": round((after["cpu_s"] - before["cpu_s"]) / window_s * 1000, 2),
                "by_command_per_s": per_s,
                "busy_ms_per_s": {name: round(usec[name] / window_s / 1000, 2) for name in per_s},
                "latency_ms_median": round(statistics.median(latencies), 2),
                "latency_ms_max": round(max(latencies), 2)}
    finally:
        if worker is not None:
            worker.kill()
            worker.wait(10)
        server.stop()


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.bench_idle_queues", description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, default=ROOT, help="the dtq tree whose worker runs (default: this one)")
    p.add_argument("--queues", default="1,2000")
    p.add_argument("--window", type=float, default=10.0, help="idle seconds counted (default 10)")
    p.add_argument("--samples", type=int, default=20, help="tasks timed one at a time (default 20)")
    args = p.parse_args(argv)
    for n in (int(q) for q in args.queues.split(",")):
        r = measure(args.root, n, args.window, args.samples)
        top = ", ".join(f"{k} {v:g}/s {r['busy_ms_per_s'][k]:g} ms/s"
                        for k, v in list(r["by_command_per_s"].items())[:5])
        print(f"{r['queues']:>6} queues: {r['commands_per_s']:>8g} commands/s, Redis CPU {r['redis_cpu_ms_per_s']:g} "
              f"ms/s ({top}); one task {r['latency_ms_median']:g} ms median, {r['latency_ms_max']:g} ms max")


if __name__ == "__main__":
    main()
