"""`make bench-cluster`: dtq on a local 3-master Redis Cluster beside one redis-server, in one run.

Two workloads, each drained on one node and on the cluster, interleaved over --rounds:
- 12 queues of one partition each (tasks spread evenly);
- one queue of 6 partitions (DTQ_QUEUE_PARTITIONS=bench=6).

Reported per run: drain rate (tasks/s), worker round trips per task (bench.rtcount), and on the
cluster the share of keys (after the pre-fill) and of commands (during the drain, the bench's own
counter INCRs and polls left out) held by each master, with the largest deviation from an even
third. The machine has 2 cores: the cluster's 3 masters and the workers share them, so what this
run can show is the balance and the per-task cost, not absolute scaling.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import uuid4

import redis
import redis.cluster

from dtq_core.config import DtqConfig
from dtq_core.connection import sync_client
from dtq_core.engine import Engine

from .common import (
    RESULTS,
    ROOT,
    VAR,
    RedisServer,
    fmt,
    free_port,
    machine,
    markdown_table,
    median,
    now_iso,
    wait_until,
    write_results,
)

TASK = "bench.noop"
HARNESS_COMMANDS = {"incrby", "incr", "get", "info", "dbsize", "cluster|info", "cluster|slots", "cluster|shards",
                    "cluster", "command", "command|docs", "ping", "script|load", "script", "hello", "client|setinfo",
                    "client", "readonly"}


class LocalCluster:
    """3 masters (no replicas: the bench measures throughput, not failover), made by redis-cli."""

    def __init__(self, directory: Path) -> None:
        self.nodes = [RedisServer(directory / f"node-{i}", appendonly=False, port=port, args=[
            "--cluster-enabled", "yes", "--cluster-config-file", str(directory / f"node-{i}" / "nodes.conf"),
            "--cluster-port", str(bus)]) for i, (port, bus) in enumerate(_pairs())]

    def start(self) -> LocalCluster:
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise SystemExit("redis-cli not found (apt-get install redis-tools)")
        subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes), "--cluster-yes"],
                       check=True, capture_output=True, timeout=60)
        wait_until(lambda: all(_client(n.port).cluster("info")["cluster_state"] == "ok" for n in self.nodes), 30,
                   what="cluster_state:ok")
        return self

    @property
    def url(self) -> str:
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


def _pairs() -> list[tuple[int, int]]:
    """(data port, cluster bus port) for 3 nodes, all distinct (a bus port is not data + 10000
    here: an ephemeral port plus 10000 can pass 65535)."""
    ports: list[int] = []
    while len(ports) < 6:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return list(zip(ports[:3], ports[3:], strict=True))


def _client(port: int) -> redis.Redis:
    return redis.Redis(port=port, decode_responses=True)


class Target:
    """One Redis (single or cluster) and the means to run dtq against it."""

    def __init__(self, name: str, url: str, ports: list[int]) -> None:
        self.name, self.url, self.ports = name, url, ports

    def env(self, prefix: str, partitions: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"DTQ_REDIS_URL": self.url, "DTQ_KEY_PREFIX": prefix, "DTQ_TASK_MODULES": "bench.tasks",
                    "DJANGO_SETTINGS_MODULE": "dtq_site.settings", "DTQ_LOG_LEVEL": "WARNING",
                    "DTQ_MAX_QUEUE_DEPTH": "0", "DTQ_QUEUE_PARTITIONS": partitions, "PYTHONUNBUFFERED": "1",
                    "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "dtq-bench-" + "0123456789" * 5})
        return env

    def engine(self, prefix: str, partitions: str) -> Engine:
        from dtq_core.config import parse_partitions

        return Engine(DtqConfig(redis_url=self.url, key_prefix=prefix, max_queue_depth=0,
                                queue_partitions=parse_partitions(partitions)))

    def per_node(self, what: str) -> list[int]:
        values = []
        for port in self.ports:
            c = _client(port)
            if what == "keys":
                values.append(int(c.dbsize()))
            else:
                stats = c.info("commandstats")
                values.append(sum(int(v["calls"]) for name, v in stats.items()
                                  if name.removeprefix("cmdstat_") not in HARNESS_COMMANDS))
        return values


def _share(values: list[int]) -> tuple[list[float], float]:
    total = sum(values) or 1
    shares = [v / total for v in values]
    even = 1 / len(values)
    return [round(s * 100, 1) for s in shares], round(max(abs(s - even) / even for s in shares) * 100, 1)


def drain(target: Target, *, queues: list[str], partitions: str, tasks: int, workers: int,
          concurrency: int) -> dict[str, Any]:
    prefix = f"bench{uuid4().hex[:10]}"
    engine = target.engine(prefix, partitions)
    counter = f"{prefix}:bench:count"
    client = sync_client(engine.config)
    VAR.mkdir(parents=True, exist_ok=True)
    per_queue = tasks // len(queues)
    for queue in queues:
        left = per_queue
        while left:
            chunk = min(1000, left)
            replies = engine.tasks.enqueue_many([engine.tasks.validate(TASK, {"k": counter}, queue=queue)
                                                 for _ in range(chunk)])
            if any(isinstance(r, Exception) for r in replies):
                raise RuntimeError(f"enqueue_many refused tasks: {replies[0]}")
            left -= chunk
    total = per_queue * len(queues)
    keys = target.per_node("keys")
    commands0 = target.per_node("commands")
    procs = []
    for i in range(workers):
        counts = VAR / f"{prefix}-w{i}.json"
        log = open(VAR / f"{prefix}-w{i}.log", "wb")  # noqa: SIM115 - the child owns it
        procs.append((subprocess.Popen(
            [sys.executable, "-m", "bench.rtcount", str(counts), "runworker_dtq", "--burst", "--concurrency",
             str(concurrency), "--name", f"w{i}"], cwd=ROOT, env=target.env(prefix, partitions), stdout=log,
            stderr=subprocess.STDOUT), counts))
        log.close()
    started = None
    while True:
        done = int(client.get(counter) or 0)
        if done and started is None:
            started = (time.perf_counter(), done)
        if done >= total:
            ended = time.perf_counter()
            break
        if all(p.poll() is not None for p, _ in procs):
            raise RuntimeError(f"workers exited with {done} of {total} done: see {VAR}/{prefix}-*.log")
        time.sleep(0.002)
    for proc, _ in procs:
        proc.wait(60)
    commands1 = target.per_node("commands")
    trips: Counter[str] = Counter()
    for _, path in procs:
        trips.update(json.loads(path.read_text())["round_trips"])
    trips.pop("INCRBY", None)
    trips.pop("INCR", None)
    assert started is not None
    result: dict[str, Any] = {
        "target": target.name, "tasks": total,
        "drain_per_s": (total - started[1]) / (ended - started[0]) if ended > started[0] else None,
        "round_trips_per_task": sum(trips.values()) / total,
    }
    if len(target.ports) > 1:
        result["key_share_pct"], result["key_max_dev_pct"] = _share(keys)
        result["command_share_pct"], result["command_max_dev_pct"] = _share(
            [b - a for a, b in zip(commands0, commands1, strict=True)])
    for port in target.ports:  # leave nothing behind on either Redis
        c = _client(port)
        for key in c.scan_iter(match=f"{prefix}:*", count=5000):
            c.unlink(key)
    return result


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.bench_cluster", description=__doc__.splitlines()[0])
    p.add_argument("--tasks", type=int, default=12000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=10)
    p.add_argument("--results-dir", type=Path, default=RESULTS)
    return p.parse_args(argv)


WORKLOADS = {
    "12 queues": ([f"q{i:02d}" for i in range(12)], ""),
    "1 queue x 6 partitions": (["bench"], "bench=6"),
}


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
    django.setup()
    single = RedisServer(VAR / f"redis-cluster-bench-single-{os.getpid()}", appendonly=False).start()
    cluster = LocalCluster(VAR / f"cluster-bench-{os.getpid()}").start()
    targets = [Target("single", single.url, [single.port]),
               Target("cluster", cluster.url, [n.port for n in cluster.nodes])]
    runs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    try:
        for round_no in range(args.rounds):
            for workload, (queues, partitions) in WORKLOADS.items():
                for target in targets:
                    r = drain(target, queues=queues, partitions=partitions, tasks=args.tasks, workers=args.workers,
                              concurrency=args.concurrency)
                    runs.setdefault((workload, target.name), []).append(r)
                    print(f"[round {round_no + 1}] {workload:24} {target.name:8} {fmt(r['drain_per_s'])} tasks/s "
                          f"{r['round_trips_per_task']:.3f} rt/task "
                          f"{r.get('key_share_pct', '')} {r.get('command_share_pct', '')}", flush=True)
    finally:
        cluster.stop()
        single.stop()
    rows = []
    for (workload, target), results in runs.items():
        row: dict[str, Any] = {"workload": workload, "target": target,
                               "drain_per_s": median([r["drain_per_s"] for r in results]),
                               "round_trips_per_task": median([r["round_trips_per_task"] for r in results])}
        if target == "cluster":
            row["key_max_dev_pct"] = max(r["key_max_dev_pct"] for r in results)
            row["command_max_dev_pct"] = max(r["command_max_dev_pct"] for r in results)
            row["key_share_pct"] = results[-1]["key_share_pct"]
            row["command_share_pct"] = results[-1]["command_share_pct"]
        rows.append(row)
    for row in rows:
        if row["target"] == "cluster":
            base = next(r for r in rows if r["workload"] == row["workload"] and r["target"] == "single")
            row["vs_single"] = round(row["drain_per_s"] / base["drain_per_s"], 2) if base["drain_per_s"] else None
    data = {"when": now_iso(), "machine": machine(), "args": vars(args) | {"results_dir": str(args.results_dir)},
            "rows": rows, "runs": {f"{w}/{t}": r for (w, t), r in runs.items()}}
    md = markdown_table([("workload", "workload"), ("target", "Redis"), ("drain_per_s", "drain tasks/s"),
                         ("vs_single", "vs one node"), ("round_trips_per_task", "worker round trips/task"),
                         ("key_share_pct", "keys per master %"), ("key_max_dev_pct", "keys max dev %"),
                         ("command_share_pct", "commands per master %"),
                         ("command_max_dev_pct", "commands max dev %")], rows)
    json_path, md_path = write_results("cluster", data, md, directory=args.results_dir)
    print(md)
    print(f"results: {json_path} {md_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
