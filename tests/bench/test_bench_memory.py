"""bench.bench_memory end to end on a tiny run: real redis-server, in-process burst workers."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent.parent


@pytest.mark.slow
def test_it_measures_bytes_per_task_by_state_and_the_count_bound() -> None:
    proc = subprocess.run([sys.executable, "-m", "bench.bench_memory", "--tasks", "60"], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 11 and cells[0] in ("SUCCEEDED", "DEAD_LETTERED", "CANCELLED", "EXPIRED", "QUEUED",
                                            "PENDING", "RUNNING"):
            rows[(cells[0], cells[1])] = [float(c.replace(",", "")) for c in cells[2:]]
    assert len(rows) == 11
    record = rows[("SUCCEEDED", "defaults")][1]
    assert 0 < record <= 300 < rows[("SUCCEEDED", "keep all, no count")][1]  # the goal: a compact record
    assert rows[("DEAD_LETTERED", "defaults")][1] > 1000  # kept whole: payload and error history
    # Unfinished records are whole but lean (no field at its default: issue 20); a running one adds
    # its start and worker id, and its pending stream entry and running-index entry.
    queued, running = rows[("QUEUED", "any")], rows[("RUNNING", "any")]
    assert 300 < queued[1] < running[1] < 600 and rows[("PENDING", "any")][1] < 500
    assert running[5] > queued[5] > 0
    # Redis's own count for the run's keys (MEMORY STATS) holds more than the record alone: the
    # result, the indexes and each key's place in the key tables; and the results' expiry frees
    # their share. A dead-lettered task keeps no result: the two counts are one.
    succeeded, dead = rows[("SUCCEEDED", "defaults")], rows[("DEAD_LETTERED", "defaults")]
    assert succeeded[6] > succeeded[7] > record
    assert dead[6] == dead[7] > dead[1]
    assert "Count bound: 60 tasks succeeded with DTQ_SUCCEEDED_RETENTION_COUNT=20: 20 task records and 20 results" \
        in proc.stdout
