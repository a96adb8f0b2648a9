"""bench.bench_enqueue --bulk on a tiny run against a real redis-server: the child checks that every
task of every batch was created, and the table says a batch of 10 is one write (0.1 round trips
a task, where one call per task would be 1) and what Redis spent per task (timings are not
compared: the machine is shared)."""

from __future__ import annotations

import re

import pytest

from bench.bench_enqueue import main


def test_bulk_mode_times_batches_of_one_write_each(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--bulk", "10", "--calls", "50", "--rounds", "2", "--huey-python", "/nonexistent/python"]) == 0
    out = capsys.readouterr().out
    assert "50 enqueues in batches of 10 x 2 rounds" in out
    (row,) = re.findall(r"^\| dtq \| (\d+) \| (\d+) \| ([0-9.]+), ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$", out, re.M)
    best, median, _, _, round_trips, redis_cpu = (float(v) for v in row)
    assert best >= median > 0
    # One write a batch (a time-driven refresh, e.g. of the events flag, may add one in a turn).
    assert 0.1 <= round_trips < 0.2
    assert redis_cpu > 0
    assert "huey" not in out.split("x 2 rounds")[1]
