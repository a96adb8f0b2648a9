"""manage.py workflow list|show|cancel (issue 23): table and --json, cancel audited as cli:<os user>,
one line and a non-zero exit on bad input, an unknown id or a Redis that is down."""

from __future__ import annotations

import getpass
import json
import os
import pty
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from dtq_core.engine import Engine

from ..conftest import ROOT, next_millisecond, worker_env
from ..redis_server import RedisServer

TREE = {"chain": [{"type": "dtq.echo", "queue": "wf"},
                  {"group": [{"type": "dtq.echo", "queue": "wf"}] * 2, "then": {"type": "dtq.echo", "queue": "wf"}}]}
GHOST = "ab12-w" + "0" * 31


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False, timeout=60)


def test_list_prints_a_table_and_json(live_engine: Engine) -> None:
    first = live_engine.workflows.submit(TREE)
    next_millisecond(live_engine)  # a later creation time: same-ms workflows are listed by id
    second = live_engine.workflows.submit({"chain": [{"type": "dtq.echo"}]})
    table = run("workflow", "list").splitlines()
    assert table[0].split() == ["WORKFLOW", "STATUS", "STEPS", "CREATED", "FINISHED"] and len(table) == 3
    assert table[1].split()[:3] == [second, "RUNNING", "0/1"] and table[2].split()[:3] == [first, "RUNNING", "0/4"]
    rows = json.loads(run("workflow", "list", "--json"))
    assert [r["id"] for r in rows] == [second, first]
    assert json.loads(run("workflow", "list", "--status", "CANCELLED", "--json")) == []
    assert len(json.loads(run("workflow", "list", "--limit", "1", "--json"))) == 1


def test_show_lists_every_step(live_engine: Engine) -> None:
    wid = live_engine.workflows.submit(TREE)
    lines = run("workflow", "show", wid).splitlines()
    assert lines[0].split() == ["workflow:", wid] and lines[1].split() == ["status:", "RUNNING"]
    assert lines[2].split(":", 1)[1].strip() == "0 of 4 finished (0%)"
    header = next(i for i, line in enumerate(lines) if line.startswith("#"))
    steps = [line.split() for line in lines[header + 1:]]
    assert [s[0] for s in steps] == ["0", "1", "2", "3"] and steps[0][4] == "QUEUED" and steps[3][5] == "1,2"
    assert json.loads(run("workflow", "show", wid, "--json")) == live_engine.workflows.get(wid)


def test_cancel_is_audited_as_the_os_user(live_engine: Engine) -> None:
    wid = live_engine.workflows.submit(TREE)
    assert run("workflow", "cancel", wid).strip() == \
        f"workflow {wid} cancelled (4 steps; those not finished are CANCELLED)"
    assert live_engine.workflows.get(wid)["status"] == "CANCELLED"
    [entry] = [e for e in live_engine.audit.list().items if e["action"] == "workflow.cancel"]
    assert entry["actor"] == f"cli:{getpass.getuser()}" and entry["source"] == "cli"
    with pytest.raises(CommandError, match="already CANCELLED"):
        run("workflow", "cancel", wid)


@pytest.mark.parametrize("action", ["show", "cancel"])
def test_an_unknown_id_fails_in_one_line_and_audits_nothing(live_engine: Engine, action: str) -> None:
    for wid in ("ghost", GHOST):
        with pytest.raises(CommandError, match="not found"):
            run("workflow", action, wid)
    assert live_engine.audit.list().items == []


@pytest.mark.parametrize("args", [("workflow",), ("workflow", "explode"), ("workflow", "show"),
                                  ("workflow", "show", "a/b"), ("workflow", "cancel", "x" * 65),
                                  ("workflow", "list", "--status", "DONE"), ("workflow", "list", "--limit", "0"),
                                  ("workflow", "list", "--limit", "9" * 40)])
def test_bad_arguments_raise_a_command_error_in_process(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^Error: "):
        run(*args)


@pytest.mark.parametrize("args", [("workflow",), ("workflow", "show", "x" * 65), ("workflow", "cancel", GHOST)])
def test_bad_input_exits_non_zero_with_one_line(redis_server: RedisServer, key_prefix: str,
                                                args: tuple[str, ...]) -> None:
    proc = manage(*args, env=worker_env(redis_server.url, key_prefix))
    assert proc.returncode in (1, 2) and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [("workflow", "list"), ("workflow", "show", GHOST), ("workflow", "cancel", GHOST)])
def test_every_subcommand_says_when_redis_is_down(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^cannot reach Redis at redis://127.0.0.1:1/0"):
        run(*args)


class Terminal(StringIO):
    """A stdin that says it is a terminal, holding what the operator types."""

    def isatty(self) -> bool:
        return True


def test_at_a_terminal_cancel_asks_first_unless_yes(live_engine: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    wid = live_engine.workflows.submit(TREE)
    monkeypatch.setattr(sys, "stdin", Terminal("n\n"))
    out = run("workflow", "cancel", wid)
    assert out.startswith(f"cancel workflow {wid} (RUNNING, 0 of 4 steps finished)? [y/N] ")
    assert out.rstrip().endswith("not cancelled")
    assert live_engine.workflows.get(wid)["status"] == "RUNNING" and live_engine.audit.list().items == []
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    assert run("workflow", "cancel", wid).rstrip().endswith(f"workflow {wid} cancelled "
                                                            "(4 steps; those not finished are CANCELLED)")
    assert live_engine.workflows.get(wid)["status"] == "CANCELLED"
    other = live_engine.workflows.submit(TREE)
    monkeypatch.setattr(sys, "stdin", Terminal(""))  # nothing typed: --yes must not read it
    assert run("workflow", "cancel", other, "--yes").startswith(f"workflow {other} cancelled")
    monkeypatch.setattr(sys, "stdin", Terminal("y\n"))
    with pytest.raises(CommandError, match="not found"):  # asked about nothing that does not exist
        run("workflow", "cancel", GHOST)


def test_a_real_terminal_is_asked_and_no_keeps_it_running(live_engine: Engine, redis_server: RedisServer,
                                                          key_prefix: str) -> None:
    wid = live_engine.workflows.submit(TREE)
    main, terminal = pty.openpty()
    try:
        os.write(main, b"n\n")
        proc = subprocess.run([sys.executable, "manage.py", "workflow", "cancel", wid], cwd=ROOT, stdin=terminal,
                              env=worker_env(redis_server.url, key_prefix), capture_output=True, text=True,
                              check=False, timeout=60)
    finally:
        os.close(main)
        os.close(terminal)
    assert proc.returncode == 0 and "? [y/N] not cancelled" in proc.stdout, (proc.stdout, proc.stderr)
    assert live_engine.workflows.get(wid)["status"] == "RUNNING"
    proc = manage("workflow", "cancel", wid, env=worker_env(redis_server.url, key_prefix))  # stdin no terminal
    assert proc.returncode == 0 and proc.stdout.startswith(f"workflow {wid} cancelled"), proc.stderr
    assert live_engine.workflows.get(wid)["status"] == "CANCELLED"
