"""bench.bench_script_cost on a tiny run: every case's calls run against a real redis-server (the
children check each call's reply: a submitted task is fetched and completes SUCCEEDED) and the
table names each case with its Redis time per call (timings are not compared: the machine is
shared)."""

from __future__ import annotations

import re
import shutil

import pytest

from bench.bench_script_cost import CASES, main


def test_every_case_runs_and_reports_its_redis_time_per_call(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--calls", "40", "--rounds", "1"]) == 0
    rows = dict(re.findall(r"^\| ([a-z0-9-]+) \| ([0-9.]+) \|$", capsys.readouterr().out, re.M))
    assert set(rows) == set(CASES)
    assert all(float(value) > 0 for value in rows.values()), rows


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="--instructions needs valgrind (apt-get install valgrind)")
def test_instructions_mode_counts_what_redis_executes_per_call(capsys: pytest.CaptureFixture[str]) -> None:
    """Under callgrind: a submit costs Redis more instructions than an EVALSHA of `return 1`,
    and both counts are whole numbers of thousands, not timings."""
    assert main(["--instructions", "--calls", "5", "--rounds", "1", "--cases", "return1,submit"]) == 0
    out = capsys.readouterr().out
    assert "instructions Redis executed per call" in out
    rows = {case: int(value.replace(",", ""))
            for case, value in re.findall(r"^\| ([a-z0-9-]+) \| ([0-9,]+) \|$", out, re.M)}
    assert set(rows) == {"return1", "submit"}
    assert 1_000 < rows["return1"] < rows["submit"], rows
