"""manage.py periodic list|show|pause|resume|trigger|delete: table and --json, actions audited as
cli:<os user>, one line and a non-zero exit on bad input, an unknown name or a Redis that is down."""

from __future__ import annotations

import getpass
import json
import shutil
import subprocess
import sys
from datetime import datetime
from io import StringIO

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from dtq_core.codec import dumps
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.periodic import PeriodicSpec

from ..conftest import ROOT, worker_env
from ..redis_server import RedisServer


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def declare(engine: Engine) -> None:
    engine.periodic.create(PeriodicSpec(name="report.nightly", type="dtq.echo", payload={"r": 1}, cron="0 3 * * *",
                                        timezone="Europe/Berlin", queue="reports"), actor=Actor.cli())
    engine.periodic.create(PeriodicSpec(name="tick", type="dtq.echo", every_seconds=30), actor=Actor.cli())


def test_list_prints_a_table_and_json(live_engine: Engine) -> None:
    declare(live_engine)
    table = run("periodic", "list").splitlines()
    assert table[0].split()[:2] == ["NAME", "SCHEDULE"] and len(table) == 3
    assert table[1].startswith("report.nightly") and "0 3 * * * (Europe/Berlin)" in table[1]
    assert table[2].startswith("tick") and "every 30" in table[2]
    rows = json.loads(run("periodic", "list", "--json"))
    assert [r["name"] for r in rows] == ["report.nightly", "tick"] and rows == live_engine.periodic.list()


def test_list_of_none_is_a_header_and_empty_json(live_engine: Engine) -> None:
    assert run("periodic", "list").split() == ["NAME", "SCHEDULE", "TYPE", "QUEUE", "NEXT", "RUN", "LAST", "RUN",
                                              "PAUSED", "SOURCE"]
    assert json.loads(run("periodic", "list", "--json")) == []


def test_show_prints_the_schedule_and_its_runs(live_engine: Engine) -> None:
    declare(live_engine)
    fired = live_engine.periodic.trigger("report.nightly", actor=Actor.cli())
    lines = run("periodic", "show", "report.nightly").splitlines()
    fields = {line.split(":", 1)[0]: line.split(":", 1)[1].strip() for line in lines}
    assert fields["name"] == "report.nightly" and fields["cron"] == "0 3 * * *" and fields["queue"] == "reports"
    assert fields["timezone"] == "Europe/Berlin" and fields["description"] and fields["payload"] == dumps({"r": 1})
    assert json.loads(run("periodic", "show", "report.nightly", "--json")) == live_engine.periodic.get("report.nightly")
    [run_line] = [line for line in lines if line.startswith("run:")]
    assert run_line.endswith(f"task {fired['task_id']}") and fired["scheduled_for"] in run_line


def test_pause_resume_trigger_delete_are_audited_as_the_os_user(live_engine: Engine) -> None:
    declare(live_engine)
    audited = len(live_engine.audit.list().items)
    assert run("periodic", "pause", "tick").strip() == "periodic task tick paused"
    assert live_engine.periodic.get("tick")["paused"] is True
    assert run("periodic", "resume", "tick").startswith("periodic task tick resumed, next run 20")
    assert live_engine.periodic.get("tick")["paused"] is False
    out = run("periodic", "trigger", "tick").strip()
    assert out.startswith("periodic task tick triggered: task ")
    task = live_engine.tasks.get(out.rsplit(" ", 1)[1])
    assert task["periodic_name"] == "tick"
    assert run("periodic", "delete", "tick").strip() == "periodic task tick deleted"
    assert [p["name"] for p in live_engine.periodic.list()] == ["report.nightly"]
    entries = live_engine.audit.list().items
    assert len(entries) == audited + 4
    assert {(e["actor"], e["source"]) for e in entries[:4]} == {(f"cli:{getpass.getuser()}", "cli")}
    assert all("tick" in e["target"] for e in entries[:4])


@pytest.mark.parametrize("action", ["show", "pause", "resume", "trigger", "delete"])
def test_an_unknown_name_fails_in_one_line_and_audits_nothing(live_engine: Engine, action: str) -> None:
    with pytest.raises(CommandError, match="not found"):
        run("periodic", action, "ghost")
    assert live_engine.audit.list().items == []


@pytest.mark.parametrize("args", [("periodic",), ("periodic", "explode"), ("periodic", "pause"),
                                  ("periodic", "pause", "a/b"), ("periodic", "show", "x" * 201),
                                  ("periodic", "list", "--colour")])
def test_bad_arguments_raise_a_command_error_in_process(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^Error: "):
        run(*args)


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False, timeout=60)


@pytest.mark.parametrize("args", [("periodic",), ("periodic", "pause"), ("periodic", "show", "x" * 201),
                                  ("periodic", "trigger", "ghost")])
def test_bad_input_exits_non_zero_with_one_line(redis_server: RedisServer, key_prefix: str,
                                                args: tuple[str, ...]) -> None:
    proc = manage(*args, env=worker_env(redis_server.url, key_prefix))
    assert proc.returncode in (1, 2) and proc.stdout == "", proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_redis_down_exits_1_with_one_line_naming_it() -> None:
    env = worker_env("redis://:hunter2@127.0.0.1:1/0", "dtqtest:down")
    for args in (("periodic", "list"), ("periodic", "trigger", "tick")):
        proc = manage(*args, env=env)
        assert proc.returncode == 1, proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("CommandError: cannot reach Redis at redis://:***@127.0.0.1:1/0")
        assert "hunter2" not in line


@pytest.mark.parametrize("args", [("periodic", "list"), ("periodic", "show", "t"), ("periodic", "pause", "t"),
                                  ("periodic", "resume", "t"), ("periodic", "trigger", "t"),
                                  ("periodic", "delete", "t")])
def test_every_subcommand_says_when_redis_is_down(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^cannot reach Redis at redis://127.0.0.1:1/0"):
        run(*args)


def test_a_schedule_declared_in_code_is_paused_from_the_cli_but_not_deleted(live_engine: Engine) -> None:
    live_engine.periodic.sync_declared([PeriodicSpec(name="declared", type="dtq.echo", every_seconds=60)])
    with pytest.raises(CommandError, match="declared in code"):
        run("periodic", "delete", "declared")
    assert run("periodic", "pause", "declared").strip() == "periodic task declared paused"
    assert [(p["name"], p["source"], p["paused"]) for p in live_engine.periodic.list()] == [("declared", "code", True)]


@pytest.mark.skipif(shutil.which("faketime") is None, reason="needs faketime (apt-get install faketime)")
def test_a_resume_from_a_host_whose_clock_is_ahead_goes_on_from_the_next_tick_on_redis_time(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str, redis_client: redis.Redis) -> None:
    # An operator's host two minutes ahead (no NTP, a VM resumed): the leader fires on Redis's
    # clock, so the next tick is computed on it too, not 60 ticks of an every-2-seconds schedule late.
    live_engine.periodic.create(PeriodicSpec(name="beat", type="dtq.echo", every_seconds=2), actor=Actor.cli())
    live_engine.periodic.pause("beat", actor=Actor.cli())
    proc = subprocess.run(["faketime", "-f", "+120s", sys.executable, "manage.py", "periodic", "resume", "beat"],
                          cwd=ROOT, env=worker_env(redis_server.url, key_prefix), capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seconds, micros = redis_client.time()
    view = live_engine.periodic.get("beat")
    next_ms = datetime.fromisoformat(view["next_run_at"].replace("Z", "+00:00")).timestamp() * 1000
    assert not view["paused"] and next_ms - (int(seconds) * 1000 + int(micros) // 1000) <= 2000, view["next_run_at"]
