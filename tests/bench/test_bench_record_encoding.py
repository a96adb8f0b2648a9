"""bench.bench_record_encoding end to end on a tiny run: real redis-server, in-process burst workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_a_longer_listpack_value_keeps_records_with_a_long_payload_small() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_record_encoding", "--payloads", "64,300",
                           "--values", "64,1024", "--tasks", "50", "--drain-tasks", "200", "--rounds", "1"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip().replace(",", "") for c in line.strip("|").split("|")]
        if len(cells) == 11 and cells[0].isdigit():
            rows[(int(cells[0]), int(cells[1]))] = [float(c) for c in cells[2:]]
    assert set(rows) == {(64, 64), (64, 1024), (300, 64), (300, 1024)}
    queued, running, dead, succeeded = 0, 1, 2, 3
    # A 300-byte payload turns a record into a hashtable at Redis's default; at 1024 it stays one
    # listpack, far smaller. A 64-byte one fits either way.
    assert rows[(300, 1024)][queued] < 0.7 * rows[(300, 64)][queued]
    assert rows[(300, 1024)][running] < 0.8 * rows[(300, 64)][running]
    assert abs(rows[(64, 1024)][queued] - rows[(64, 64)][queued]) < 20
    # A dead letter's record keeps payload and error history: smaller as one listpack too.
    assert rows[(300, 1024)][dead] < 0.8 * rows[(300, 64)][dead]
    # A succeeded task's compact record holds no payload: the setting does not matter to it.
    assert abs(rows[(300, 1024)][succeeded] - rows[(300, 64)][succeeded]) < 20
    assert all(row[4] > 0 and row[6] > 0 and row[8] > 0 for row in rows.values())  # CPU and rate measured
