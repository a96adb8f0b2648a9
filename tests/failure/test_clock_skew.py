"""Clock skew between hosts, injected for real: two of three worker processes run under
libfaketime (Debian's `faketime` package), one 30 s ahead and one 30 s behind, with the
scheduler lock held by a skewed one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import redis

from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from .support import Events, counter, env, execs, outcomes, pending, statuses, task, total

pytestmark = pytest.mark.slow

SKEW_S = 30
LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))
                        + sorted(Path("/usr/lib").glob("faketime/libfaketime.so.1"))), None)


def _skewed(offset_s: int) -> dict[str, str]:
    """Environment that shifts a process's wall clock (CLOCK_REALTIME) by offset_s, as a host
    whose clock is off would be; its monotonic clock stays true, as it does on such a host.

    libfaketime 0.9.10 (Debian 12) and Python 3.11 agree only this way, and not entirely: with the
    monotonic clock faked too, thread waits with a timeout (Lock.acquire, Queue.get) hang; with it
    kept true, time.sleep fails with EINVAL (its absolute clock_nanosleep is shifted anyway). So the
    skewed workers here run async handlers, which sleep on the event loop (epoll timeouts).

    Nor does libfaketime keep the GIL's switch interval (a timed condition wait) working: a thread
    waiting for the GIL is not given it after 5 ms but when the holder blocks. On several CPUs
    that comes soon; with the process's threads on one CPU (DTQ_WORKER_CPU_AFFINITY=auto pins a
    worker of sync handlers) the event loop waited 0.5 s behind a busy thread in a 2 s probe
    (6 ms without libfaketime) and up to 3.9 s in this test, so heartbeats stopped and a peer
    reclaimed live tasks. A host whose clock is off has working timed waits, so the skewed
    workers keep every CPU here: what this test injects is the skew, not libfaketime's GIL."""
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME": f"{offset_s:+d}s", "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "DTQ_WORKER_CPU_AFFINITY": "off"}


PROBE = """
import asyncio, queue, time
wall, mono = time.time(), time.monotonic()
try:
    queue.Queue().get(timeout=0.1)
except queue.Empty:
    pass
asyncio.run(asyncio.sleep(0.1))
print(wall, mono, time.monotonic() - mono)
"""


@pytest.mark.parametrize("leader", ["ahead", "behind"])
def test_workers_30s_off_run_every_task_once_on_time_and_reclaim_nothing_alive(
        engine: Engine, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess], leader: str) -> None:
    # It should survive: every task (plain, longer than the visibility timeout, retried and
    # delayed) ends SUCCEEDED exactly once, retries and delays come due on time whoever writes
    # or promotes them, and no worker takes a task a live peer is running.
    if LIBFAKETIME is None:
        pytest.skip("libfaketime not found: apt-get install faketime")
    engine = Engine(engine.config)  # on the system clock: delays count from now
    keys = engine.keys
    offsets = {"ahead": SKEW_S, "behind": -SKEW_S, "normal": 0}
    # The fault works here: Python's wall clock under libfaketime is off by the offset; its
    # monotonic clock, thread waits and asyncio's sleeps are not.
    for offset in (SKEW_S, -SKEW_S):
        probe = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, **_skewed(offset)},
                               capture_output=True, text=True, timeout=30, check=False)
        assert probe.returncode == 0, probe.stderr
        wall, mono, waited = map(float, probe.stdout.split())
        assert abs(wall - time.time() - offset) < 5 and abs(mono - time.monotonic()) < 5, (offset, probe.stdout)
        assert 0.19 <= waited < 5, probe.stdout
    procs: dict[str, WorkerProcess] = {}

    def logs() -> str:
        return "\n".join(f"--- {name}\n{proc.output()}" for name, proc in procs.items())

    # The skewed leader starts first and takes the scheduler lock; the others join after it.
    for name in [leader, *(n for n in offsets if n != leader)]:
        procs[name] = start_worker("--name", name, "--queues", "skew", "--concurrency", "4",
                                   **env(**(_skewed(offsets[name]) if offsets[name] else {})))
        wait_for(lambda name=name: redis_client.zscore(keys.workers(), name) is not None, timeout=30, message=logs)
        if name == leader:
            wait_for(lambda: redis_client.get(keys.leader()) == leader, timeout=10, message=logs)
    with Events(redis_client, keys) as events:
        plain = [engine.tasks.enqueue("failure.awork", {"seconds": 0.05}, queue="skew").id for _ in range(8)]
        long = [engine.tasks.enqueue("failure.awork", {"seconds": 3}, queue="skew").id for _ in range(4)]
        flaky = [engine.tasks.enqueue("failure.flaky", {"retry_after": {"1": 0.3}}, queue="skew").id for _ in range(6)]
        submitted = time.time()
        delayed = [engine.tasks.enqueue("failure.awork", {"seconds": 0}, queue="skew", delay_seconds=4).id
                   for _ in range(4)]
        ids = plain + long + flaky + delayed
        # Delayed tasks do not start early, whichever clock the leader has.
        while time.time() < submitted + 3:
            assert set(statuses(redis_client, keys, delayed)) == {"PENDING"}, logs()
            time.sleep(0.1)
        # On time: the longest path is the 4 s delay (retries wait 0.3 s); a skewed clock cost 30 s.
        wait_for(lambda: all(s == "SUCCEEDED" for s in statuses(redis_client, keys, ids)), timeout=20,
                 message=lambda: f"{dict(zip(ids, statuses(redis_client, keys, ids), strict=True))}\n{logs()}")

        for tid in ids:
            runs = 2 if tid in flaky else 1
            assert execs(redis_client, keys, tid) == runs, (tid, task(redis_client, keys, tid))
            assert engine.tasks.get(tid)["attempt"] == runs
        assert counter(redis_client, keys, "redeliveries") == 0, logs()  # nothing alive was reclaimed
        assert counter(redis_client, keys, "fenced") == 0
        stats = outcomes(redis_client, keys)
        succeeded = sum(n for field, n in stats.items() if field.startswith("skew|") and field.endswith("|succeeded"))
        assert succeeded == len(ids), stats
        events.sync()  # every event published so far has been read
        terminal = Counter(e["task_id"] for e in events.seen if e.get("type") == "task.succeeded")
    assert terminal == dict.fromkeys(ids, 1)
    assert pending(redis_client, keys, ["skew"]) == 0 and total(redis_client, keys, keys.running) == 0
    assert all(proc.proc.poll() is None for proc in procs.values()), logs()
    for name, offset in offsets.items():  # each skewed worker noticed, e.g. "...clock is +30.0s off Redis's"
        said = [float(m) for m in re.findall(r"this host's clock is ([+-][\d.]+)s off", procs[name].output())]
        assert (bool(said) and all(abs(v - offset) < 2 for v in said)) if offset else not said, logs()
