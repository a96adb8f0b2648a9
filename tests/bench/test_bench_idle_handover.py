"""bench.bench_idle_handover on a tiny run: a real worker process on a throwaway redis-server, its
path stamped at every point for every task (timings are not compared: the machine is shared)."""

from __future__ import annotations

import re

import pytest

from bench.bench_idle_handover import SEGMENTS, main


def test_every_task_is_stamped_at_every_point_in_order(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--tasks", "5", "--rounds", "1"]) == 0
    out = capsys.readouterr().out
    assert "round 1: current: 5 of 5 tasks stamped" in out
    rows = re.findall(r"^\| current \| 5 \| (.+) \|$", out, re.M)
    assert len(rows) == 3, out  # medians, 90th and 99th percentiles
    tables = [dict(zip([label for label, _, _ in SEGMENTS],
                       [float(cell.replace(",", "")) for cell in row.split(" | ")], strict=True)) for row in rows]
    cells = tables[0]
    # The worker's own points come in order; "reply -> claimed" compares two processes' moments
    # that Redis answers in one turn, and may be below zero.
    ordered = ("submit", "claimed -> handed", "handed -> thread", "thread -> body", "submit -> body")
    assert all(cells[label] > 0 for label in ordered), cells
    for label, _, _ in SEGMENTS:  # each column's percentiles rise from table to table
        assert tables[0][label] <= tables[1][label] <= tables[2][label], (label, tables)


@pytest.mark.parametrize("value", ["-1", "soon"])
def test_a_bad_pause_exits_2_with_a_usage_message(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--pause-ms", value])
    assert exit_.value.code == 2
    assert "--pause-ms" in capsys.readouterr().err
