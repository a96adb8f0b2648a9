"""bench.bench_script_cost on a tiny run: every case's calls run against a real redis-server (the
children check each call's reply: a submitted task is fetched and completes SUCCEEDED) and the
table names each case with its Redis time per call (timings are not compared: the machine is
shared)."""

from __future__ import annotations

import re

import pytest

from bench.bench_script_cost import CASES, main


def test_every_case_runs_and_reports_its_redis_time_per_call(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--calls", "40", "--rounds", "1"]) == 0
    rows = dict(re.findall(r"^\| ([a-z0-9-]+) \| ([0-9.]+) \|$", capsys.readouterr().out, re.M))
    assert set(rows) == set(CASES)
    assert all(float(value) > 0 for value in rows.values()), rows
