"""bench.bench_submit_commands on a tiny run: the Redis commands a submit's script runs, counted by
a real redis-server (counts are exact; the timings are not checked, the machine is shared)."""

from __future__ import annotations

import re

import pytest

from bench.bench_submit_commands import main


def test_it_counts_the_commands_of_each_kind_of_submit(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--calls", "64", "--rounds", "1"]) == 0
    rows = dict(re.findall(r"^\| ([^|]+?) \| ([0-9.]+) \|", capsys.readouterr().out, re.M))
    # A plain submit: the owner check, the depth gate (on by default: an XLEN per priority), XADD,
    # HSET, PEXPIRE, ZADD (recent), SET NX (ready), and a trim of the recent index by one submit in
    # 16. A held key (answered before the gate): GET, HGET (throttle: GET alone). A debounce without
    # a ttl or request id adds ZSCORE, HDEL (the waiting task's expiry and request id), HSET, ZADD,
    # PEXPIRE and SET. Each also has the owner's GET and the answer's HGET of the status.
    assert 9.0 <= float(rows["plain"]) < 9.5
    held = [float(rows[mode]) for mode in ("while_active", "throttle", "debounce")]
    assert held == pytest.approx([4, 3, 10], abs=0.05)  # (one stray command of the harness: 1/64)
    assert float(rows["while_active, a new key each time"]) == pytest.approx(float(rows["plain"]) + 2, abs=0.3)
