"""manage.py queue limits Q [--concurrency N|none] [--rate 5/1s|none] [--group-concurrency N|none]
[--group-rate 10/60s|none] [--clear] [--json]: shown with usage, changed by merging, audited as
cli:<os user>, one clear line and a non-zero exit on bad input or a Redis that is down."""

from __future__ import annotations

import getpass
import json
import subprocess
import sys
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor

from ..api.support import drain
from ..conftest import ROOT, worker_env
from ..redis_server import RedisServer


def run(*args: str) -> str:
    out = StringIO()
    call_command("queue", "limits", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


def rows(text: str) -> dict[str, list[str]]:
    """The table's rows by limit name."""
    return {line.split()[0]: line.split()[1:] for line in text.splitlines()[1:5] if line.strip()}


def test_it_shows_the_limits_and_their_usage(live_engine: Engine) -> None:
    live_engine.limits.set("mail", {"concurrency": 2, "rate": {"limit": 100, "period_s": 60}}, actor=Actor.cli())
    for _ in range(3):
        live_engine.tasks.enqueue("dtq.echo", queue="mail")
    drain(live_engine.config, queues=["mail"])
    shown = run("mail")
    assert shown.splitlines()[0].split() == ["LIMIT", "VALUE", "USAGE"]
    table = rows(shown)
    assert table["concurrency"] == ["2", "0", "running"]
    assert table["rate"][:2] == ["100/60s", "3"] and table["group-concurrency"] == ["none"]
    as_json = json.loads(run("mail", "--json"))
    assert as_json["concurrency"] == 2 and as_json["usage"]["rate_used"] == 3 and as_json["queue"] == "mail"
    # A burst worker fetching 3 with room for 2 was held back: the counter says so.
    assert as_json["usage"]["throttled_total"] >= 1
    assert "set by: api; scope: exact" in shown and f"throttled: {as_json['usage']['throttled_total']} " in shown


def test_options_change_only_the_limits_they_name_and_are_audited(live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="mail")
    out = run("mail", "--concurrency", "2", "--rate", "5/1s")
    assert out.splitlines()[0] == "limits of queue mail set: concurrency 2, rate 5/1s"
    out = run("mail", "--group-concurrency", "1", "--group-rate", "10/m")
    assert out.splitlines()[0] == "limits of queue mail set: group-concurrency 1, group-rate 10/60s"
    stored = live_engine.limits.get("mail")
    assert (stored["concurrency"], stored["rate"], stored["group_concurrency"], stored["group_rate"]) == (
        2, {"limit": 5, "period_s": 1.0}, 1, {"limit": 10, "period_s": 60.0})
    run("mail", "--rate", "none", "--concurrency", "3")
    stored = live_engine.limits.get("mail")
    assert stored["rate"] is None and stored["concurrency"] == 3 and stored["group_concurrency"] == 1
    assert json.loads(run("mail", "--rate", "10/500ms", "--json"))["rate"] == {"limit": 10, "period_s": 0.5}
    out = run("mail", "--clear")
    assert out.splitlines()[0] == "limits of queue mail cleared"
    assert all(live_engine.limits.get("mail")[f] is None
               for f in ("concurrency", "rate", "group_concurrency", "group_rate"))
    entries = live_engine.audit.list().items
    assert len(entries) == 5
    assert {(e["action"], e["target"], e["actor"], e["source"]) for e in entries} == {
        ("queue.limits", "queue:mail", f"cli:{getpass.getuser()}", "cli")}


def test_setting_limits_on_a_queue_not_used_yet_creates_it(live_engine: Engine) -> None:
    run("fresh", "--concurrency", "1")
    assert live_engine.limits.get("fresh")["concurrency"] == 1 and "fresh" in live_engine.queues.names()


def test_showing_or_clearing_an_unknown_queue_fails_and_creates_nothing(live_engine: Engine) -> None:
    for args in (("ghost",), ("ghost", "--clear"), ("ghost", "--json")):
        with pytest.raises(CommandError, match="queue 'ghost' not found"):
            run(*args)
    assert live_engine.queues.names() == [] and live_engine.audit.list().items == []


@pytest.mark.parametrize(("args", "message"), [
    (("mail", "--concurrency", "0"), "--concurrency: must be a whole number from 1 to 100000"),
    (("mail", "--concurrency", "100001"), "--concurrency"),
    (("mail", "--concurrency", "two"), "--concurrency"),
    (("mail", "--concurrency", "1.5"), "--concurrency"),
    (("mail", "--group-concurrency", "-1"), "--group-concurrency"),
    (("mail", "--rate", "5"), "--rate: must be LIMIT/PERIOD such as 5/1s"),
    (("mail", "--rate", "5/1"), "--rate"),
    (("mail", "--rate", "0/1s"), "--rate: the limit must be from 1"),
    (("mail", "--rate", "5/0s"), "--rate: the period must be from 1ms to 24h"),
    (("mail", "--rate", "5/25h"), "--rate: the period"),
    (("mail", "--group-rate", "5/1x"), "--group-rate"),
    (("mail", "--rate", "5/" + "9" * 50 + "s"), "--rate"),
    (("mail", "--clear", "--concurrency", "2"), "--clear removes every limit"),
    (("Mail",), "is not a queue name"),
    (("mail", "--burst", "3"), "unrecognized arguments"),
])
def test_bad_input_is_refused_in_one_line_and_changes_nothing(live_engine: Engine, args: tuple[str, ...],
                                                                message: str) -> None:
    live_engine.limits.set("mail", {"concurrency": 4}, actor=Actor.cli())
    with pytest.raises(CommandError, match="^Error: .*" + message.replace("-", r"\-")):
        run(*args)
    assert live_engine.limits.get("mail")["concurrency"] == 4 and len(live_engine.audit.list().items) == 1


def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False, timeout=60)


def test_the_process_exits_2_on_bad_input_and_1_when_redis_is_down(redis_server: RedisServer,
                                                                      key_prefix: str) -> None:
    for args in (("--rate", "fast"), ("--clear", "--rate", "none")):
        proc = manage("queue", "limits", "mail", *args, env=worker_env(redis_server.url, key_prefix))
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    env = worker_env("redis://:hunter2@127.0.0.1:1/0", "dtqtest:down")
    for args in ((), ("--concurrency", "2"), ("--clear",)):
        proc = manage("queue", "limits", "mail", *args, env=env)
        assert proc.returncode == 1 and proc.stdout == "", proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("CommandError: cannot reach Redis at redis://:***@127.0.0.1:1/0")


@pytest.mark.parametrize("args", [(), ("--concurrency", "2"), ("--clear",), ("--json",)])
def test_every_form_says_when_redis_is_down(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^cannot reach Redis at redis://127.0.0.1:1/0"):
        run("mail", *args)
