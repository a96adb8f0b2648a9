"""Shared pieces of the failure suite: short timeouts for real worker processes, and reads of
what must survive (task status, pending entries, the handlers' side-effect log)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import redis

from dtq_core.keys import Keys, tag_of
from dtq_core.partitions import Layout, parse_registry

from ..conftest import wait_for

# Short timeouts so each crash scenario takes seconds (heartbeat < visibility, as validated).
FAST: dict[str, Any] = {
    "DTQ_VISIBILITY_TIMEOUT_S": 2,
    "DTQ_HEARTBEAT_INTERVAL_S": 0.5,
    "DTQ_DRAIN_TIMEOUT_S": 2,
    "DTQ_SCHEDULER_LOCK_TTL_S": 2,
    "DTQ_STALE_CLAIM_S": 2,
    "DTQ_RETRY_BASE_S": 0.1,
    "DTQ_RETRY_MAX_S": 0.5,
    "DTQ_TASK_MODULES": "tests.failure.handlers",
}


def env(**overrides: Any) -> dict[str, Any]:
    return {**FAST, **overrides}


def status(client: redis.Redis, keys: Keys, task_id: str) -> str | None:
    return client.hget(keys.task(task_id), "status")


def statuses(client: redis.Redis, keys: Keys, task_ids: Iterable[str]) -> list[str | None]:
    pipe = client.pipeline(transaction=False)
    for task_id in task_ids:
        pipe.hget(keys.task(task_id), "status")
    return pipe.execute()


def task(client: redis.Redis, keys: Keys, task_id: str) -> dict[str, str]:
    return client.hgetall(keys.task(task_id))


def layouts(client: redis.Redis, keys: Keys) -> dict[str, Layout]:
    """Every registered queue's partition layout, as the registry holds it now."""
    return parse_registry(client.hgetall(keys.queues()))


def partitions(client: redis.Redis, keys: Keys, queues: Iterable[str] | None = None) -> list[str]:
    """The tags of every partition (serving and draining) of these queues (None: of every queue)."""
    found = layouts(client, keys)
    names = found if queues is None else [q for q in queues if q in found]
    return [tag for queue in names for tag in found[queue].all_tags]


def streams(client: redis.Redis, keys: Keys, queue: str) -> list[str]:
    """Every stream of the queue, in every partition."""
    return [stream for tag in partitions(client, keys, [queue]) for stream in keys.streams(tag, queue)]


def pending(client: redis.Redis, keys: Keys, queues: Iterable[str]) -> int:
    """Entries pending (delivered, not acknowledged) in the consumer group of every queue stream."""
    total = 0
    for queue in queues:
        for stream in streams(client, keys, queue):
            if client.exists(stream):
                total += int(client.xpending(stream, Keys.GROUP)["pending"])
    return total


def total(client: redis.Redis, keys: Keys, key: Callable[[str], str], queues: Iterable[str] | None = None) -> int:
    """The size of one per-partition zset (keys.running, keys.schedule, keys.schedule_claims...),
    summed over the queues' partitions (None: every queue's)."""
    return sum(int(client.zcard(key(tag))) for tag in partitions(client, keys, queues))


def schedule_score(client: redis.Redis, keys: Keys, task_id: str) -> float | None:
    """When the task is due in its partition's schedule (None: not scheduled)."""
    return client.zscore(keys.schedule(tag_of(task_id)), task_id)


def depth(client: redis.Redis, keys: Keys, queue: str) -> int:
    """Entries in the queue's streams, in every partition."""
    return sum(int(client.xlen(stream)) for stream in streams(client, keys, queue))


def outcomes(client: redis.Redis, keys: Keys) -> dict[str, int]:
    """The dtq_tasks_total counts ("queue|type|outcome" -> n), summed over every partition."""
    out: dict[str, int] = {}
    for tag in partitions(client, keys):
        for field, n in client.hgetall(keys.stats_tasks(tag)).items():
            out[field] = out.get(field, 0) + int(n)
    return out


def dead_letters(client: redis.Redis, keys: Keys) -> list[tuple[str, dict[str, str]]]:
    """Every partition's DLQ entries, oldest first."""
    entries = [entry for tag in partitions(client, keys) for entry in client.xrange(keys.dlq(tag))]
    return sorted(entries, key=lambda entry: tuple(int(part) for part in entry[0].split("-")))


def execs(client: redis.Redis, keys: Keys, task_id: str | None = None) -> Any:
    """Handler runs from the side-effect log: for one task, or all as {task_id: runs}."""
    key = f"{keys.prefix}:testlog:execs"
    if task_id is not None:
        return int(client.hget(key, task_id) or 0)
    return {k: int(v) for k, v in client.hgetall(key).items()}


def effects(client: redis.Redis, keys: Keys) -> dict[str, int]:
    return {k: int(v) for k, v in client.hgetall(f"{keys.prefix}:testlog:effects").items()}


def counter(client: redis.Redis, keys: Keys, name: str) -> int:
    """A worker counter (redeliveries, absorbed, fenced...), summed over every partition."""
    return sum(int(client.hget(keys.stats_counters(tag), name) or 0) for tag in partitions(client, keys))


def registered(client: redis.Redis, keys: Keys, name: str) -> bool:
    return client.zscore(keys.workers(), name) is not None


def stop(pid: int) -> None:
    os.kill(pid, signal.SIGSTOP)


def cont(pid: int) -> None:
    os.kill(pid, signal.SIGCONT)


def started(client: redis.Redis, keys: Keys, *task_ids: str) -> bool:
    """True once every task is RUNNING and its handler has begun (logged its execution)."""
    return all(status(client, keys, t) == "RUNNING" and execs(client, keys, t) >= 1 for t in task_ids)


def stopped(pid: int) -> bool:
    """True while the process is stopped (by SIGSTOP, e.g. at a DTQ_TEST_FAULT point)."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0] == "T"


class Events:
    """Every event published on the events channel while open, collected by a reader thread.

    sync() publishes a marker and waits until it is read: pub/sub keeps a channel's order, so
    every event published before the call has been collected by then.
    """

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.client, self.channel = client, keys.events()
        self.seen: list[dict[str, Any]] = []
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._pubsub.subscribe(**{self.channel: lambda message: self.seen.append(json.loads(message["data"]))})
        self._thread = self._pubsub.run_in_thread(sleep_time=0.01, daemon=True)

    def __enter__(self) -> Events:
        self.sync()
        return self

    def __exit__(self, *exc: object) -> None:
        self._thread.stop()
        self._thread.join(5)
        self._pubsub.close()

    def sync(self) -> None:
        marker = {"type": "test.marker", "id": uuid.uuid4().hex}

        def read_back() -> bool:
            if marker in self.seen:
                return True
            self.client.publish(self.channel, json.dumps(marker))  # again: the first may beat SUBSCRIBE
            return False

        wait_for(read_back, timeout=10, interval=0.05, message="the events reader fell behind")

    def count(self, etype: str, task_id: str) -> int:
        return sum(1 for e in self.seen if e.get("type") == etype and e.get("task_id") == task_id)


def spans(client: redis.Redis, keys: Keys, task_id: str) -> dict[int, dict[str, float]]:
    """When each attempt's handler started and ended (failure.timed): {attempt: {"start": t, "end": t}}."""
    out: dict[int, dict[str, float]] = {}
    for line in client.lrange(f"{keys.prefix}:testlog:spans", 0, -1):
        tid, attempt, edge, at = line.split("|")
        if tid == task_id:
            out.setdefault(int(attempt), {})[edge] = float(at)
    return out


# -- injected infrastructure faults (network partition, full disk) ----------------------------

def run_root(*args: str, timeout: float = 15) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, check=False)


class Partition:
    """Drops every packet a process group (matched by its gid, `meta skgid`) sends to one local TCP
    port, with an nftables table of its own: the worker stays up but cannot reach Redis, and
    Redis cannot hear it. Only this table is ever touched; close() deletes it."""

    def __init__(self, gid: int, port: int) -> None:
        self.gid, self.port = gid, port
        self.table = f"dtq_test_partition_{os.getpid()}_{port}"
        self.created = False

    def open(self) -> None:
        """Create the table (no rule yet), or pytest.skip with the reason nft gives."""
        if os.geteuid() != 0:
            pytest.skip("partition tests need root (nftables)")
        if shutil.which("nft") is None:
            pytest.skip("nft not found: apt-get install nftables")
        done = run_root("nft", "add", "table", "inet", self.table)
        if done.returncode != 0:
            pytest.skip(f"the kernel refused an nftables table: {done.stderr.strip()}")
        self.created = True
        done = run_root("nft", "add", "chain", "inet", self.table, "out",
                        "{ type filter hook output priority 0 ; policy accept ; }")
        if done.returncode != 0:
            self.close()
            pytest.skip(f"the kernel refused an nftables output chain: {done.stderr.strip()}")

    def cut(self) -> None:
        done = run_root("nft", "add", "rule", "inet", self.table, "out", "meta", "skgid", str(self.gid),
                        "tcp", "dport", str(self.port), "drop")
        assert done.returncode == 0, done.stderr

    def heal(self) -> None:
        done = run_root("nft", "flush", "chain", "inet", self.table, "out")
        assert done.returncode == 0, done.stderr

    def close(self) -> None:
        if self.created:
            run_root("nft", "delete", "table", "inet", self.table)
            self.created = False


class TmpfsMount:
    """A small tmpfs mounted on a directory (Redis's dir), unmounted by close()."""

    def __init__(self, path: Path, size: str) -> None:
        self.path, self.size = path, size
        self.mounted = False

    def mount(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        done = run_root("mount", "-t", "tmpfs", "-o", f"size={self.size}", "tmpfs", str(self.path))
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        self.mounted = True

    def close(self) -> None:
        if self.mounted:
            done = run_root("umount", str(self.path))
            if done.returncode != 0:
                run_root("umount", "-l", str(self.path))
            self.mounted = False
