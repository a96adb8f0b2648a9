"""The console benchmark still runs (at a toy size; the full 1,000,000-task run is `python -m bench.bench_console`)."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import ROOT


def test_the_console_bench_runs_at_a_small_size() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_console", "--waiting", "1000", "--dead", "1000",
                           "--repeat", "1"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "dlq (text search)" in proc.stdout and ": PASS" in proc.stdout
