"""The dtq benchmark harness, end to end on a tiny run: real redis-server, real worker processes,
the real web server (daphne, as make run). It checks the shape of the results, never the timings
(the machine is shared)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis

from bench.common import markdown_table, percentile
from bench.peers import driver
from bench.peers.__main__ import Runner, _header, parse, redis_work, start_redis, summarise
from bench.peers.systems import SYNC_ONLY, SYSTEMS
from bench.rtcount import _label
from tests.redis_server import free_port

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_it_runs_every_dtq_measurement_and_writes_results(tmp_path: Path) -> None:
    # It should drain, time latency, redeliver after SIGKILL and submit over HTTP, then write
    # the JSON and Markdown results where it was told.
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--tasks", "200", "--rounds", "1", "--workers", "1,2",
         "--latency-samples", "20", "--http-requests", "60", "--http-clients", "4", "--redelivery-runs", "1",
         "--skip", "others", "--results-dir", str(tmp_path), "--name", "smoke"],
        cwd=ROOT, capture_output=True, text=True, timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads((tmp_path / "smoke-latest.json").read_text())
    one = data["drain"]["current/1w"]
    for field in ("drain_per_s", "round_trips_per_task", "hot_path_round_trips_per_task", "peak_rss_mb",
                  "worker_cpu_us_per_task", "redis_commands_per_task", "enqueue_single_per_s"):
        assert one[field] > 0, field
    assert one["tasks"] == 200
    assert one["body_round_trips_per_task"] == 1  # exactly one INCR per task ran: none lost, none twice
    assert "FCALL completeTasks" in one["round_trips"]
    assert data["drain"]["current/2w"]["workers"] == 2
    assert data["latency"]["current"]["samples"] == 20
    current = data["latency"]["current"]
    assert 0 < current["body_p50_ms"] <= current["p50_ms"] <= current["p99_ms"]  # the body runs before completion
    for floor in ("floor (async)", "floor (sync)"):
        assert 0 < data["latency"][floor]["body_p50_ms"] <= data["latency"][floor]["body_p99_ms"], floor
    assert data["redelivery"]["runs"] == 1 and data["redelivery"]["median_s"] > 0
    assert data["http"]["requests"] == 60 and data["http"]["submit_per_s"] > 0
    assert data["machine"]["cores"]
    markdown = (tmp_path / "smoke-latest.md").read_text()
    assert "| floor (sync) |" in markdown
    assert "| current/1w |" in markdown and "Redelivery after SIGKILL" in markdown
    # The same tree without task history, drained beside it: the history's cost, stated (issue 24).
    assert data["drain"]["no-history/1w"]["body_round_trips_per_task"] == 1
    assert "Task history on the hot path (issue 24)" in markdown


@pytest.mark.slow
def test_a_compare_tree_enqueues_its_pre_fill_with_its_own_engine(tmp_path: Path) -> None:
    # --compare is an A/B: the other tree's engine makes its pre-fill (so the enqueue columns
    # compare the trees), as its workers drain it, with each number of workers asked for.
    other = tmp_path / "other"
    other.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(other)], input=archive, check=True)
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--compare", str(other), "--tasks", "2500", "--rounds", "1", "--workers", "1,2",
         "--skip", "limits,history,latency,redelivery,http,others", "--results-dir", str(tmp_path), "--name", "ab"],
        cwd=ROOT, capture_output=True, text=True, timeout=150,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    drain = json.loads((tmp_path / "ab-latest.json").read_text())["drain"]
    assert drain["current/1w"]["enqueue_tree"] == str(ROOT)
    assert drain["compare/1w"]["enqueue_tree"] == str(other.resolve())
    assert drain["compare/2w"]["enqueue_tree"] == str(other.resolve())
    for label in ("current/1w", "compare/1w", "current/2w", "compare/2w"):
        assert drain[label]["tasks"] == 2500 and drain[label]["body_round_trips_per_task"] == 1, label
        assert drain[label]["enqueue_single_per_s"] > 0 and drain[label]["enqueue_bulk_per_s"] > 0, label
    markdown = (tmp_path / "ab-latest.md").read_text()
    assert "× current, same workers" in markdown and "| compare/2w |" in markdown


def test_it_labels_round_trips_by_command_and_script() -> None:
    shas = {b"abc123": "fetchTasks"}
    assert _label([b"*3\r\n$7\r\nEVALSHA\r\n$6\r\nabc123\r\n$1\r\n0\r\n"], shas) == "EVALSHA fetchTasks"
    fcall = b"*3\r\n$5\r\nFCALL\r\n$34\r\ndtq_completeTasks_0123456789abcdef\r\n$1\r\n1\r\n"
    assert _label([fcall], shas) == "FCALL completeTasks"
    assert _label(b"*2\r\n$4\r\nincr\r\n$1\r\nk\r\n", shas) == "INCR"


def test_it_computes_nearest_rank_percentiles_and_tables() -> None:
    assert percentile([5, 1, 4, 2, 3], 50) == 3
    assert percentile(list(range(1, 101)), 99) == 99
    assert percentile([], 50) is None
    table = markdown_table([("a", "A"), ("b", "B")], [{"a": 1234.5, "b": None}])
    assert table.splitlines()[2] == "| 1,234 | n/a |"


def test_peer_latency_rounds_stop_at_their_time_bound_with_enough_samples(
        redis_server: Any, redis_client: Any, key_prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A system that answers slowly (arq's default polls every 0.5 s) must not make every extra
    # latency round cost a minute: past --max-s the driver stops, but never under MIN_SAMPLES.
    key = f"{key_prefix}:counter"

    class InlineApp:  # the "worker" runs the body inside send: the notification comes at once
        @staticmethod
        def send(k: str, body: str) -> None:
            assert body == "sync"
            redis_client.incr(k)

    monkeypatch.setenv("BENCH_REDIS_URL", redis_server.url)
    redis_client.config_set("notify-keyspace-events", "K$")
    try:
        bounded = asyncio.run(driver.latency(InlineApp, key, samples=100, warmup=2, max_s=0.0))
        unbounded = asyncio.run(driver.latency(InlineApp, key, samples=30, warmup=2, max_s=60.0))
    finally:
        redis_client.config_set("notify-keyspace-events", "")
    assert bounded["samples"] == driver.MIN_SAMPLES
    assert unbounded["samples"] == 30
    assert 0 < unbounded["p50_ms"] <= unbounded["p99_ms"]
    assert len(unbounded["times_ms"]) == 30  # every sample, for the run to pool its rounds
    assert int(redis_client.get(key)) == (2 + driver.MIN_SAMPLES) + (2 + 30)  # every task ran once


def test_peer_summary_pools_latency_samples_of_every_round() -> None:
    # p99 must come from all samples of all rounds (not a median of per-round maxima), while each
    # round's p50 stays visible beside it.
    dtq = next(s for s in SYSTEMS if s.name == "dtq" and s.config == "default" and s.body == "sync")
    rounds = [[0.3] * 495 + [9.0] * 5, [0.5] * 500, [0.29] * 500]
    runs = {dtq.key: {"drain": [], "latency": [
        {"p50_ms": percentile(t, 50), "p99_ms": percentile(t, 99), "samples": len(t), "times_ms": t}
        for t in rounds]}}
    (row,) = summarise([dtq], runs)
    assert row["samples"] == 1500
    assert row["p50_ms"] == 0.3 and row["p99_ms"] == 0.5
    assert row["p50_rounds"] == "0.30 / 0.50 / 0.29"


def test_peer_tables_give_ratios_to_the_fastest_peer_of_the_same_body() -> None:
    systems = [s for s in SYSTEMS if s.name in ("dtq", "huey", "arq") and s.config in ("default", "best")]
    drain = {"sync: huey (best)": 2000.0, "sync: dtq (default)": 3000.0, "async: arq (best)": 1000.0,
             "async: dtq (default)": 4000.0}
    runs = {s.key: {"drain": [{"tasks": 10, "drain_per_s": drain.get(s.key, 500.0)}], "latency": []}
            for s in systems}
    rows = {r["key"]: r for r in summarise(systems, runs)}
    assert rows["sync: dtq (default)"]["drain_x_fastest_peer"] == 1.5
    assert rows["async: dtq (default)"]["drain_x_fastest_peer"] == 4.0
    assert {s.body for s in SYSTEMS if s.name in SYNC_ONLY} == {"sync"}  # n/a in the async table


def test_peer_redis_work_leaves_out_the_benchmarks_own_commands() -> None:
    # The harness polls the counter with GET and reads INFO: neither may be charged to the system.
    before = ({"get": 5, "info": 2, "incr": 0, "xack": 0}, 1.0)
    after = ({"get": 105, "info": 4, "incr": 50, "xack": 50, "evalsha": 10}, 1.005)
    work = redis_work(before, after, own_gets=100, tasks=50)
    assert work["redis_commands_per_task"] == (50 + 50 + 10) / 50
    assert work["redis_commands"] == {"incr": 1.0, "xack": 1.0, "evalsha": 0.2}
    assert round(work["redis_cpu_us_per_task"], 6) == 100.0


@pytest.mark.slow
def test_peer_runs_carry_the_payload_asked_for_and_count_its_memory() -> None:
    # --payload-bytes: every task carries the pad to its body (each task still runs once), and
    # Redis's memory per queued task grows by at least the pad, as a user's larger tasks would.
    dtq = next(s for s in SYSTEMS if s.name == "dtq" and s.config == "default" and s.body == "sync")
    args = parse(["--payload-bytes", "2000", "--redis-config", "hash-max-listpack-value=1024",
                  "--port", str(free_port())])
    server = start_redis(args.port, args.redis_config)
    try:
        client = redis.Redis.from_url(server.url)
        assert client.config_get("hash-max-listpack-value") == {"hash-max-listpack-value": "1024"}
        plain = Runner(server.url, 0).drain(dtq, 200)
        padded = Runner(server.url, 0, payload_bytes=args.payload_bytes)
        queued = padded.driver(dtq, "enqueue", "--n", "5", "--single", "5", timeout=120)
        assert queued["enqueue_single_per_s"] > 0
        payloads = [json.loads(client.hget(k, "payload")) for k in client.scan_iter(match="*task:*", count=1000)
                    if client.type(k) == b"hash" and client.hexists(k, "payload")]
        assert len(payloads) == 5
        assert all(len(p["p"]) == 2000 and p["k"] == "bench:count" for p in payloads)
        drained = padded.drain(dtq, 200)
    finally:
        server.stop()
    assert plain["extra_runs"] == drained["extra_runs"] == 0  # every body ran exactly once
    # The pad's 2,000 bytes, at least (a 2 KB value also makes the record a hashtable).
    assert drained["queued_bytes_per_task"] - plain["queued_bytes_per_task"] >= 2000
    header = " ".join(_header({"machine": {"cpu": "x", "cores": 2, "memory_gb": 1, "os": "l", "python": "3",
                                           "redis": "7", "load_avg_at_start": []}, "args": vars(args)}))
    assert "a second argument of 2,000 characters" in header and "`hash-max-listpack-value=1024`" in header


def test_peer_options_refuse_what_they_cannot_use(capsys: pytest.CaptureFixture[str]) -> None:
    for bad in (["--payload-bytes", "-1"], ["--redis-config", "no-equals-sign"], ["--redis-config", "=1"]):
        with pytest.raises(SystemExit) as exit_info:
            parse(bad)
        assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "--payload-bytes must be 0 or more" in err
    assert "--redis-config: a Redis setting is NAME=VALUE, not 'no-equals-sign'" in err
    # A name Redis does not know: its own message, and no redis-server left behind on the port.
    port = free_port()
    with pytest.raises(SystemExit, match="Redis setting no-such-setting=1: Redis refused it"):
        start_redis(port, ["no-such-setting=1"])
    with pytest.raises(redis.ConnectionError):
        redis.Redis(port=port, socket_connect_timeout=0.5).ping()
