"""dtq measurements with real processes: a throwaway redis-server, `manage.py runworker_dtq`
workers (run through bench.rtcount, which counts their Redis round trips) and the web server.

Each measurement uses its own key prefix, so runs never see each other's keys.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import uuid4

import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.events import CHECK_EVERY_S, announce
from dtq_core.keys import Keys

from .common import (
    ROOT,
    VAR,
    RedisServer,
    commandstats,
    commandstats_usec,
    depth_cap_for,
    free_port,
    median,
    percentile,
    server_totals,
    wait_until,
)
from .httpload import post_json_request, run_load

TASK = "bench.noop"
QUEUE = "bench"
SINGLE_ENQUEUES = 2000  # of the pre-fill, enqueued one by one (the rest in bulk)
BULK_CHUNK = 1000
# Round trips the worker makes for every batch of tasks: everything else is amortised housekeeping.
# (A fetch round is one write however many partitions it asks, as is a completion batch; an idle
# worker waits on its wake subscription, which costs no round trip.)
# The worker's script calls: FCALLs since the hot-path scripts became Redis functions (a tree
# given to --compare from before that sends EVALSHAs).
HOT_PATH = ("EVALSHA fetchTasks", "EVALSHA completeTasks", "FCALL fetchTasks", "FCALL completeTasks")


class Rig:
    """A Redis plus the means to start dtq processes against it (from `root`, a dtq tree)."""

    def __init__(self, server: RedisServer, root: Path = ROOT, python: str = sys.executable) -> None:
        self.server = server
        self.root = root
        self.python = python
        self.client = redis.Redis.from_url(server.url, decode_responses=True)
        VAR.mkdir(parents=True, exist_ok=True)

    def engine(self, prefix: str, **config: Any) -> Engine:
        """An engine at dtq's defaults (the depth gate included) with these DtqConfig fields over them."""
        return Engine(DtqConfig(redis_url=self.server.url, key_prefix=prefix, **config))

    def env(self, prefix: str, **overrides: Any) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"DTQ_REDIS_URL": self.server.url, "DTQ_KEY_PREFIX": prefix, "DTQ_TASK_MODULES": "bench.tasks",
                    "DJANGO_SETTINGS_MODULE": "dtq_site.settings", "DTQ_LOG_LEVEL": "WARNING",
                    "PYTHONUNBUFFERED": "1",
                    "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or "dtq-bench-" + "0123456789" * 5})
        env.update({k: str(v) for k, v in overrides.items()})
        return env

    def worker(self, prefix: str, *args: str, name: str, **env: Any) -> tuple[subprocess.Popen[bytes], Path]:
        counts = VAR / f"{prefix}-{name}.json"
        log = open(VAR / f"{prefix}-{name}.log", "wb")  # noqa: SIM115 - the child owns it
        proc = subprocess.Popen(
            [self.python, "-m", "bench.rtcount", str(counts), "runworker_dtq", "--queues", QUEUE, "--name", name,
             *args], cwd=self.root, env=self.env(prefix, **env), stdout=log, stderr=subprocess.STDOUT)
        log.close()
        return proc, counts

    def prefill(self, engine: Engine, n: int, key: str, config: dict[str, Any]) -> dict[str, Any]:
        """prefill with this rig's tree: in this process for this tree, else in a child process
        that runs the other tree's engine (an A/B of the enqueue path then compares the trees, not
        this tree with itself). engine: this tree's, for the same prefix and config."""
        if self.root.resolve() == ROOT.resolve():
            return {**prefill(engine, n, key), "enqueue_tree": str(ROOT)}
        return prefill_in(self, engine, n, key, config)

    def cleanup(self, prefix: str) -> None:
        for key in self.client.scan_iter(match=f"{prefix}:*", count=5000):
            self.client.unlink(key)


def new_prefix() -> str:
    return f"bench{uuid4().hex[:10]}"


def counter_key(prefix: str) -> str:
    return f"{prefix}:bench:count"


def prefill(engine: Engine, n: int, key: str, single: int = SINGLE_ENQUEUES) -> dict[str, float | None]:
    """Enqueue n no-op tasks: the first `single` one by one, the rest with enqueue_many in chunks."""
    single = min(single, n)
    client = engine.client
    stats0, totals0 = commandstats(client), server_totals(client)
    started = time.perf_counter()
    for _ in range(single):
        engine.tasks.enqueue(TASK, {"k": key}, queue=QUEUE)
    single_s = time.perf_counter() - started
    stats1, totals1 = commandstats(client), server_totals(client)
    # Nothing polls during the enqueues: every GET is the script's (the partition's owner).
    work = redis_work(stats0, stats1, totals0, totals1, single, harness=("info",)) if single else {}
    started = time.perf_counter()
    left = n - single
    while left > 0:
        chunk = min(BULK_CHUNK, left)
        replies = engine.tasks.enqueue_many([engine.tasks.validate(TASK, {"k": key}, queue=QUEUE)
                                             for _ in range(chunk)])
        if any(isinstance(r, Exception) for r in replies):
            raise RuntimeError(f"enqueue_many refused tasks: {replies[0]}")
        left -= chunk
    bulk_s = time.perf_counter() - started
    return {"enqueue_single_per_s": single / single_s if single else None,
            "enqueue_bulk_per_s": (n - single) / bulk_s if n > single else None,
            "enqueue_redis_commands_per_task": work.get("commands_per_task"),
            "enqueue_redis_cpu_us_per_task": work.get("cpu_us_per_task"),
            "enqueue_top_commands": work.get("top", [])}


# Commands of the harness itself (the drain's GET polling of the counter, the INFO that measures):
# not the queue's work.
HARNESS_COMMANDS = ("get", "info")


# The other tree's side of prefill_in: its engine enqueues, one phase per line the parent sends,
# so the parent takes its INFO snapshots between the phases.
PREFILL_CHILD = r"""
import json, os, sys, time
sys.path.insert(0, os.getcwd())
import dtq_core
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
url, prefix, n, single, key, task, queue, chunk, config = sys.argv[1:]
n, single, chunk = int(n), int(single), int(chunk)
engine = Engine(DtqConfig(redis_url=url, key_prefix=prefix, **json.loads(config)))
print(json.dumps({"tree": os.path.dirname(os.path.dirname(os.path.abspath(dtq_core.__file__)))}), flush=True)
sys.stdin.readline()
started = time.perf_counter()
for _ in range(single):
    engine.tasks.enqueue(task, {"k": key}, queue=queue)
print(json.dumps({"single_s": time.perf_counter() - started}), flush=True)
sys.stdin.readline()
started, left = time.perf_counter(), n - single
while left > 0:
    replies = engine.tasks.enqueue_many([engine.tasks.validate(task, {"k": key}, queue=queue)
                                         for _ in range(min(chunk, left))])
    if any(isinstance(r, Exception) for r in replies):
        sys.exit(f"enqueue_many refused tasks: {replies[0]}")
    left -= min(chunk, left)
print(json.dumps({"bulk_s": time.perf_counter() - started}), flush=True)
"""


def prefill_in(rig: Rig, engine: Engine, n: int, key: str, config: dict[str, Any]) -> dict[str, Any]:
    """prefill, the enqueues made by rig's tree in a child process (PREFILL_CHILD)."""
    single = min(SINGLE_ENQUEUES, n)
    proc = subprocess.Popen(
        [rig.python, "-c", PREFILL_CHILD, rig.server.url, engine.config.key_prefix, str(n), str(single), key, TASK,
         QUEUE, str(BULK_CHUNK), json.dumps(config)],
        cwd=rig.root, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdin is not None and proc.stdout is not None

    def step() -> dict[str, Any]:
        line = proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"the pre-fill in {rig.root} stopped (exit {proc.wait(10)})")
        return json.loads(line)

    try:
        tree = step()["tree"]
        stats0, totals0 = commandstats(rig.client), server_totals(rig.client)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        single_s = step()["single_s"]
        stats1, totals1 = commandstats(rig.client), server_totals(rig.client)
        proc.stdin.write("go\n")
        proc.stdin.flush()
        bulk_s = step()["bulk_s"]
    finally:
        proc.stdin.close()
        if proc.wait(60) != 0:
            raise RuntimeError(f"the pre-fill in {rig.root} exited with {proc.returncode}")
    work = redis_work(stats0, stats1, totals0, totals1, single, harness=("info",)) if single else {}
    return {"enqueue_single_per_s": single / single_s if single else None,
            "enqueue_bulk_per_s": (n - single) / bulk_s if n > single else None,
            "enqueue_redis_commands_per_task": work.get("commands_per_task"),
            "enqueue_redis_cpu_us_per_task": work.get("cpu_us_per_task"),
            "enqueue_top_commands": work.get("top", []), "enqueue_tree": tree}


def redis_work(stats0: dict[str, int], stats1: dict[str, int], totals0: dict[str, float],
               totals1: dict[str, float], tasks: int, *, body_incr: int = 0, top: int = 8,
               harness: tuple[str, ...] = HARNESS_COMMANDS) -> dict[str, Any]:
    """Redis's own work per task between two INFO snapshots: commands executed (INFO
    commandstats: top-level ones and those scripts run; not the harness's, nor `body_incr`
    INCRBYs of the task bodies, redis-py's INCR) and Redis CPU (used_cpu_user + used_cpu_sys,
    everything included), with the commands that made most of it."""
    delta = {name: stats1.get(name, 0) - stats0.get(name, 0) for name in stats1}
    for name in harness:
        delta.pop(name, None)
    if body_incr:
        delta["incrby"] = delta.get("incrby", 0) - body_incr
    delta = {name: n for name, n in delta.items() if n > 0}
    ranked = sorted(delta.items(), key=lambda kv: -kv[1])
    return {"commands_per_task": sum(delta.values()) / tasks,
            "cpu_us_per_task": (totals1["cpu_s"] - totals0["cpu_s"]) * 1e6 / tasks,
            "top": [f"{name.upper()} {n / tasks:.2f}" for name, n in ranked[:top]]}


def _wait_counter(client: redis.Redis, key: str, target: int, timeout: float) -> tuple[float, int]:
    """Wait until the counter reaches target; return (when, value) at the first observation."""
    def reached() -> tuple[float, int] | None:
        value = int(client.get(key) or 0)
        return (time.perf_counter(), value) if value >= target else None
    return wait_until(reached, timeout, interval=0.002, what=f"{key} >= {target}")


# Limits no drain can reach (issue 22): what a limit costs on the hot path when it never binds.
NON_BINDING_LIMITS: dict[str, dict[str, Any]] = {
    "concurrency": {"concurrency": 100_000},
    "concurrency+rate": {"concurrency": 100_000, "rate": {"limit": 1_000_000, "period_s": 1}},
}


def drain(rig: Rig, *, tasks: int, workers: int = 1, concurrency: int = 10,
          limits: dict[str, Any] | None = None, env: dict[str, Any] | None = None,
          config: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pre-fill `tasks` no-op tasks, start `workers` burst workers, time the drain. limits: set on
    the queue first (engine.limits), e.g. one of NON_BINDING_LIMITS. env: the workers' extra
    variables; config: the enqueuing engine's DtqConfig fields (bench_integrations sets both)."""
    prefix = new_prefix()
    config = dict(config or {})
    cap = depth_cap_for(tasks)
    if cap is not None:
        config.setdefault("max_queue_depth", cap)
    engine, key = rig.engine(prefix, **config), counter_key(prefix)
    try:
        if limits:
            from dtq_core.engine.audit import Actor
            engine.limits.set(QUEUE, limits, actor=Actor(name="bench", source="cli"))
        enqueue = rig.prefill(engine, tasks, key, config)
        stats0, totals0 = commandstats(rig.client), server_totals(rig.client)
        usec0 = commandstats_usec(rig.client)
        procs = [rig.worker(prefix, "--burst", "--concurrency", str(concurrency), name=f"w{i}", **(env or {}))
                 for i in range(workers)]
        first_at, first_value = _wait_counter(rig.client, key, 1, timeout=60)
        end_at, _ = _wait_counter(rig.client, key, tasks, timeout=60 + tasks / 100)
        for proc, _ in procs:
            if proc.wait(60) != 0:
                raise RuntimeError(f"worker exited with {proc.returncode}: see {VAR}/{prefix}-*.log")
        stats1, totals1 = commandstats(rig.client), server_totals(rig.client)
        usec = {name: n - usec0.get(name, 0) for name, n in commandstats_usec(rig.client).items()}
        succeeded = succeeded_count(rig, engine)
        if succeeded != tasks:
            raise RuntimeError(f"{succeeded} of {tasks} tasks recorded as succeeded")
        counts: Counter[str] = Counter()
        rss: list[float] = []
        cpu_s = 0.0
        for _, path in procs:
            data = json.loads(path.read_text())
            counts.update(data["round_trips"])
            cpu_s += data.get("cpu_s") or 0.0
            if data.get("peak_rss_kb"):
                rss.append(round(data["peak_rss_kb"] / 1024, 1))
        body = counts.pop("INCRBY", 0) + counts.pop("INCR", 0)  # the task body's round trip, not dtq's
        dtq_trips = sum(counts.values())
        hot = sum(counts.get(name, 0) for name in HOT_PATH)
        # Server-side deltas, minus the harness's own GET polling and INFO calls.
        polls = stats1.get("get", 0) - stats0.get("get", 0) + stats1.get("info", 0) - stats0.get("info", 0)
        work = redis_work(stats0, stats1, totals0, totals1, tasks, body_incr=tasks)
        evalsha = sum(stats1.get(c, 0) - stats0.get(c, 0) for c in ("evalsha", "fcall"))
        return {
            **enqueue,
            "tasks": tasks, "workers": workers, "concurrency": concurrency,
            "drain_per_s": (tasks - first_value) / (end_at - first_at) if end_at > first_at else None,
            "elapsed_s": end_at - first_at,
            "peak_rss_mb": max(rss) if rss else None,
            "worker_cpu_us_per_task": cpu_s * 1e6 / tasks,
            "round_trips_per_task": dtq_trips / tasks,
            "hot_path_round_trips_per_task": hot / tasks,
            "body_round_trips_per_task": body / tasks,
            "evalsha_per_task": evalsha / tasks,
            "redis_commands_per_task": (totals1["commands"] - totals0["commands"] - polls) / tasks,
            "redis_cpu_us_per_task": (totals1["cpu_s"] - totals0["cpu_s"]) * 1e6 / tasks,
            # From INFO commandstats, without the harness's polls and the bodies' INCRs: the queue's own.
            "queue_commands_per_task": work["commands_per_task"],
            "top_commands": work["top"],
            # Where the Redis CPU goes: executing the scripts (EVALSHA and FCALL, the commands they run
            # included), the bodies' INCRBYs, and the rest (reading requests, writing replies,
            # the event loop: what each round trip costs beyond its command).
            "script_us_per_task": (usec.get("evalsha", 0) + usec.get("fcall", 0)) / tasks,
            "body_us_per_task": usec.get("incrby", 0) / tasks,
            "top_script_usec": [f"{name.upper()} {n / tasks:.1f}" for name, n in
                                sorted(((k, v) for k, v in usec.items()
                                        if k not in ("evalsha", "fcall", "incrby", "get", "info") and v > 0),
                                       key=lambda kv: -kv[1])[:8]],
            "round_trips": dict(sorted(counts.items(), key=lambda kv: -kv[1])),
        }
    finally:
        rig.cleanup(prefix)


def succeeded_count(rig: Rig, engine: Engine) -> int:
    """The bench queue's succeeded tasks, summed over its partitions."""
    layout = engine.registry.get(QUEUE, fresh=True)
    tags = layout.all_tags if layout is not None else ()
    return sum(int(rig.client.hget(engine.keys.stats_tasks(tag), f"{QUEUE}|{TASK}|succeeded") or 0) for tag in tags)


def _stop(proc: subprocess.Popen[bytes], timeout: float = 20) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _registered(rig: Rig, prefix: str, *names: str) -> bool:
    return all(rig.client.zscore(Keys(prefix).workers(), n) is not None for n in names)


def _keyspace_channel(key: str) -> str:
    return f"__keyspace@0__:{key}"


def latency(rig: Rig, *, samples: int = 200, warmup: int = 20) -> dict[str, Any]:
    """Sequential tasks on an idle worker: enqueue -> the body's INCR (keyspace notification, as
    for the peers and the floor) and enqueue -> the task.succeeded event; p50/p99 of each."""
    prefix = new_prefix()
    engine, key = rig.engine(prefix), counter_key(prefix)
    proc, _ = rig.worker(prefix, "--concurrency", "10", name="lat")
    rig.client.config_set("notify-keyspace-events", "K$")
    pubsub = engine.client.pubsub(ignore_subscribe_messages=True)
    try:
        wait_until(lambda: _registered(rig, prefix, "lat") or proc.poll() is not None, 30, what="worker start")
        pubsub.subscribe(engine.keys.events(), _keyspace_channel(key))
        # A listener, as the console's feed is (DTQ_EVENTS=auto); the worker reads the key at most
        # once every CHECK_EVERY_S, so the first sample waits that long.
        announce(engine.client, engine.keys, ttl_ms=3_600_000)
        time.sleep(CHECK_EVERY_S * 1.5)
        body_times: list[float] = []
        done_times: list[float] = []
        for i in range(warmup + samples):
            started = time.perf_counter()
            # What dtq_tasks.enqueue does: the id back, no record.
            task_id = engine.tasks.enqueue(TASK, {"k": key}, queue=QUEUE, record=False).id
            body_at = done_at = None
            deadline = time.monotonic() + 10
            while body_at is None or done_at is None:
                message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
                now = time.perf_counter()
                if message is None:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"task {task_id} did not succeed within 10 s")
                    continue
                if message["channel"] != engine.keys.events():
                    body_at = body_at or now
                    continue
                event = json.loads(message["data"])
                if event["task_id"] == task_id and event["type"] == "task.succeeded":
                    done_at = now
            if i >= warmup:
                body_times.append(body_at - started)
                done_times.append(done_at - started)
        return {"samples": samples,
                "body_p50_ms": percentile(body_times, 50) * 1000, "body_p99_ms": percentile(body_times, 99) * 1000,
                "p50_ms": percentile(done_times, 50) * 1000, "p99_ms": percentile(done_times, 99) * 1000,
                "mean_ms": sum(done_times) / len(done_times) * 1000}
    finally:
        pubsub.close()
        rig.client.config_set("notify-keyspace-events", "")
        _stop(proc)
        rig.cleanup(prefix)


def latency_floor(rig: Rig, mode: str, *, samples: int = 200, warmup: int = 20) -> dict[str, Any]:
    """The same measurement against bench.floor's bare BLPOP -> INCR worker (async or sync)."""
    prefix = new_prefix()
    list_key, key = f"{prefix}:floor", counter_key(prefix)
    proc = subprocess.Popen([rig.python, "-m", "bench.floor", rig.server.url, list_key, key, mode], cwd=rig.root,
                            env=rig.env(prefix))
    rig.client.config_set("notify-keyspace-events", "K$")
    pubsub = rig.client.pubsub(ignore_subscribe_messages=True)
    try:
        wait_until(lambda: rig.client.exists(f"{list_key}:ready") or proc.poll() is not None, 30,
                   what="floor worker start")
        pubsub.subscribe(_keyspace_channel(key))
        times: list[float] = []
        for i in range(warmup + samples):
            started = time.perf_counter()
            rig.client.lpush(list_key, "x")
            deadline = time.monotonic() + 10
            # None also comes back for the (ignored) subscribe confirmation: wait on to the deadline.
            while pubsub.get_message(timeout=max(0.0, deadline - time.monotonic())) is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("the floor worker did not run the body within 10 s")
            if i >= warmup:
                times.append(time.perf_counter() - started)
        return {"mode": mode, "samples": samples, "body_p50_ms": percentile(times, 50) * 1000,
                "body_p99_ms": percentile(times, 99) * 1000}
    finally:
        pubsub.close()
        rig.client.config_set("notify-keyspace-events", "")
        _stop(proc)
        rig.cleanup(prefix)


def redelivery(rig: Rig, *, runs: int = 3, visibility_timeout_s: float = 2.0) -> dict[str, Any]:
    """SIGKILL the worker running a task; time from the kill to the task RUNNING again."""
    prefix = new_prefix()
    engine = rig.engine(prefix)
    env = {"DTQ_VISIBILITY_TIMEOUT_S": visibility_timeout_s, "DTQ_HEARTBEAT_INTERVAL_S": visibility_timeout_s / 4}
    procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(name: str) -> None:
        procs[name] = rig.worker(prefix, "--concurrency", "4", name=name, **env)[0]

    times: list[float] = []
    try:
        start("r0")
        start("r1")
        wait_until(lambda: _registered(rig, prefix, "r0", "r1"), 30, what="workers start")
        for run in range(runs):
            task_id = engine.tasks.enqueue("dtq.sleep", {"seconds": 60}, queue=QUEUE, max_attempts=10).id
            tkey = engine.keys.task(task_id)
            owner = wait_until(lambda tkey=tkey: rig.client.hget(tkey, "status") == "RUNNING"
                               and rig.client.hget(tkey, "worker_id"), 10, what="task start")
            killed_at = time.perf_counter()
            procs[owner].kill()
            procs[owner].wait(10)
            wait_until(lambda tkey=tkey: rig.client.hget(tkey, "status") == "RUNNING"
                       and rig.client.hget(tkey, "attempt") == "2", visibility_timeout_s + 30,
                       interval=0.005, what="redelivery")
            times.append(time.perf_counter() - killed_at)
            engine.tasks.cancel(task_id, Actor.cli())
            replacement = f"r{run + 2}"
            start(replacement)
            wait_until(lambda name=replacement: _registered(rig, prefix, name), 30, what="replacement start")
        return {"visibility_timeout_s": visibility_timeout_s, "runs": runs, "median_s": median(times),
                "max_s": max(times), "target_s": visibility_timeout_s + 2}
    finally:
        for proc in procs.values():
            _stop(proc, timeout=5)
        rig.cleanup(prefix)


def http_submit(rig: Rig, *, requests: int = 2000, clients: int = 16) -> dict[str, Any]:
    """POST /api/v1/tasks through `make run`'s web server (daphne) with `clients` concurrent
    keep-alive connections."""
    prefix, port = new_prefix(), free_port()
    log = open(VAR / f"{prefix}-web.log", "wb")  # noqa: SIM115 - the child owns it
    proc = subprocess.Popen([rig.python, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port),
                             "dtq_site.asgi:application"],
                            cwd=rig.root, env=rig.env(prefix), stdout=log, stderr=subprocess.STDOUT)
    log.close()
    try:
        wait_until(lambda: _health(port) or proc.poll() is not None, 30, interval=0.1, what="web server start")
        body = json.dumps({"type": TASK, "payload": {"k": counter_key(prefix)}, "queue": QUEUE}).encode()
        request = post_json_request("127.0.0.1", port, "/api/v1/tasks", body)
        asyncio.run(run_load("127.0.0.1", port, request, total=50, clients=4))  # warm up
        result = asyncio.run(run_load("127.0.0.1", port, request, total=requests, clients=clients))
        ok = result.statuses.get(201, 0)
        if ok != requests:
            raise RuntimeError(f"HTTP submit: statuses {dict(result.statuses)}")
        return {"requests": requests, "clients": clients, "submit_per_s": ok / result.elapsed_s,
                "p50_ms": percentile(result.latencies_s, 50) * 1000,
                "p99_ms": percentile(result.latencies_s, 99) * 1000}
    finally:
        _stop(proc, timeout=10)
        rig.cleanup(prefix)


def _health(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False
