"""manage.py dlq|queue|task: listings (table and --json), actions (audited as cli:<os user>),
--dry-run, and one clear line with a non-zero exit on bad input or a Redis that is down."""

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

from ..api.support import make_dead_letters
from ..conftest import ROOT, worker_env
from ..redis_server import RedisServer


def run(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def cli_actor() -> str:
    return f"cli:{getpass.getuser()}"


# -- dlq --------------------------------------------------------------------------------------

def test_dlq_list_prints_a_table_and_json_with_filters(live_engine: Engine) -> None:
    mail = make_dead_letters(live_engine, 2, queue="mail", message="smtp refused")
    make_dead_letters(live_engine, 1, queue="sms")
    table = run("dlq", "list").splitlines()
    assert table[0].split()[:3] == ["ENTRY", "ID", "TASK"] and len(table) == 4
    assert "smtp refused" in table[1] or "smtp refused" in table[2]
    items = json.loads(run("dlq", "list", "--queue", "mail", "--json"))
    assert {i["task_id"] for i in items} == set(mail)
    assert json.loads(run("dlq", "list", "--type", "nope", "--json")) == []
    assert len(json.loads(run("dlq", "list", "--limit", "1", "--json"))) == 1
    assert len(json.loads(run("dlq", "list", "--q", "SMTP", "--json"))) == 2


def test_dlq_list_says_when_it_stopped_looking_rather_than_claiming_more_matches(live_engine: Engine) -> None:
    [tag] = live_engine.registry.ensure("mail").tags
    pipe = live_engine.client.pipeline(transaction=False)
    for i in range(5200):  # more than a listing examines, none of them of the type asked for
        pipe.xadd(live_engine.keys.dlq(tag), {"task_id": f"{tag}-{i:032x}", "queue": "mail", "type": "dtq.fail",
                                              "attempt": 1, "error_class": "E", "error": "x", "failed_at": 1})
    pipe.execute()
    err = StringIO()
    call_command("dlq", "list", "--type", "mail.send", stdout=StringIO(), stderr=err)
    assert "more than" not in err.getvalue()
    assert "0 among the newest 5,000 dead letters examined" in err.getvalue()


def test_dlq_show_prints_the_entry_and_its_task(live_engine: Engine) -> None:
    [task_id] = make_dead_letters(live_engine, 1)
    entry = json.loads(run("dlq", "show", live_engine.tasks.get(task_id)["dlq_entry_id"]))
    assert entry["task_id"] == task_id and entry["task"]["status"] == "DEAD_LETTERED"
    for missing in ("abc-1-0", "1-0"):  # well-formed but gone, and not a dead letter's id at all
        with pytest.raises(CommandError, match="not found"):
            run("dlq", "show", missing)


def test_dlq_retry_by_id_and_all_with_filters_is_audited_as_the_os_user(live_engine: Engine) -> None:
    a = make_dead_letters(live_engine, 3, queue="a")
    b = make_dead_letters(live_engine, 2, queue="b")
    entry = live_engine.tasks.get(a[0])["dlq_entry_id"]
    assert run("dlq", "retry", entry).strip() == "retried 1 dead letter(s)"
    assert live_engine.tasks.get(a[0])["status"] == "QUEUED"
    assert run("dlq", "retry", "--all", "--queue", "b", "--dry-run").strip() == "would retry 2 dead letter(s)"
    assert live_engine.dlq.count() == 4  # a dry run changes nothing
    assert run("dlq", "retry", "--all", "--queue", "b").strip() == "retried 2 dead letter(s)"
    assert {live_engine.tasks.get(t)["status"] for t in b} == {"QUEUED"}
    audit = live_engine.audit.list().items
    assert [(e["action"], e["count"]) for e in audit] == [("dlq.retry", 2), ("dlq.retry", 1)]
    assert {e["actor"] for e in audit} == {cli_actor()} and {e["source"] for e in audit} == {"cli"}
    # Each invocation has its own request id, as API and console actions do.
    ids = [e["request_id"] for e in audit]
    assert all(i and len(i) == 32 for i in ids) and len(set(ids)) == 2


def test_dlq_discard_all_and_its_dry_run(live_engine: Engine) -> None:
    make_dead_letters(live_engine, 3)
    assert run("dlq", "discard", "--all", "--dry-run").strip() == "would discard 3 dead letter(s)"
    assert run("dlq", "discard", "--all", "--type", "dtq.fail").strip() == "discarded 3 dead letter(s)"
    assert live_engine.dlq.count() == 0
    assert live_engine.audit.list(limit=1).items[0]["target"] == "dlq:type=dtq.fail"


@pytest.mark.parametrize(("args", "message", "exit_code"), [
    (("dlq", "retry"), "say which dead letters", 2),  # usage errors exit 2, as argparse's do
    (("dlq", "retry", "abc-1-0", "--all"), "not both", 2),
    (("dlq", "discard", "--queue", "a"), "say which dead letters", 2),
    (("dlq", "retry", "not-an-id"), "is not a DLQ entry id", 1),
    (("dlq", "retry", "1-0"), "is not a DLQ entry id", 1),  # a stream entry id without its partition
    (("dlq", "retry", "abc-1-0"), "no dead letter with id abc-1-0", 1),
    (("dlq", "retry", "--all", "--type", "\udcff"), "argument type: .* is not valid UTF-8", 2),
])
def test_dlq_actions_refuse_bad_input(live_engine: Engine, args: tuple[str, ...], message: str,
                                      exit_code: int) -> None:
    make_dead_letters(live_engine, 1)
    with pytest.raises(CommandError, match=message) as refused:
        run(*args)
    assert refused.value.returncode == exit_code
    assert live_engine.audit.list().items == [] and live_engine.dlq.count() == 1


def test_arguments_that_are_not_utf8_are_refused_in_one_line(live_engine: Engine) -> None:
    # Bytes that are not UTF-8 (b"\xff") reach sys.argv as a lone surrogate.
    for args in (("task", "show", "\udcff"), ("dlq", "list", "--q", "caf\udce9"), ("task", "cancel", "\udcff")):
        with pytest.raises(CommandError, match="is not valid UTF-8") as refused:
            run(*args)
        assert refused.value.returncode == 2


# -- queue ------------------------------------------------------------------------------------

def test_queue_list_pause_resume_and_purge(live_engine: Engine) -> None:
    for priority in ("high", "low", "low"):
        live_engine.tasks.enqueue("dtq.echo", queue="work", priority=priority)
    table = run("queue", "list").splitlines()
    assert table[0].split()[0] == "QUEUE" and table[1].split() == ["work", "1", "0", "2", "3", "0", "0", "0", "no"]
    assert run("queue", "pause", "work").strip() == "queue work paused"
    assert run("queue", "pause", "work").strip() == "queue work was already paused"
    assert json.loads(run("queue", "list", "--json"))[0]["paused"] is True
    assert run("queue", "resume", "work").strip() == "queue work resumed"
    assert run("queue", "purge", "work").strip() == "purged 3 waiting task(s) from queue work"
    actions = [(e["action"], e["count"], e["actor"]) for e in live_engine.audit.list().items]
    assert [a[:2] for a in actions] == [("queue.purge", 3), ("queue.resume", 1), ("queue.pause", 0),
                                        ("queue.pause", 1)]
    assert {a[2] for a in actions} == {cli_actor()}


def test_queue_delete_refuses_a_busy_queue_and_deletes_an_empty_one(live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="junk")
    with pytest.raises(CommandError, match="queue 'junk' is not empty: 1 waiting"):
        run("queue", "delete", "junk")
    run("queue", "purge", "junk")
    assert run("queue", "delete", "junk").strip() == "queue junk deleted"
    assert run("queue", "list", "--json").strip() == "[]"
    entry = live_engine.audit.list().items[0]
    assert (entry["action"], entry["target"], entry["actor"]) == ("queue.delete", "queue:junk", cli_actor())


def test_queue_actions_on_an_unknown_queue_fail(live_engine: Engine) -> None:
    for action in ("resume", "purge", "delete"):
        with pytest.raises(CommandError, match="queue 'ghost' not found"):
            run("queue", action, "ghost")
    # A pause of a queue that has not seen a task yet registers it, paused (ahead of a deploy).
    run("queue", "pause", "ghost")
    assert live_engine.queues.get("ghost")["paused"] is True


# -- task -------------------------------------------------------------------------------------

def test_task_show_and_cancel(live_engine: Engine) -> None:
    task = live_engine.tasks.enqueue("dtq.echo", {"hello": "world"}, queue="t")
    shown = run("task", "show", task.id)
    assert f"id:               {task.id}" in shown and "status:           QUEUED" in shown
    assert '{"hello":"world"}' in shown
    assert json.loads(run("task", "show", task.id, "--json"))["payload"] == {"hello": "world"}
    assert run("task", "cancel", task.id).strip() == f"task {task.id} cancelled"
    entry = live_engine.audit.list(limit=1).items[0]
    assert (entry["action"], entry["target"], entry["actor"]) == ("task.cancel", f"task:{task.id}", cli_actor())
    with pytest.raises(CommandError, match="already CANCELLED"):
        run("task", "cancel", task.id)
    # Kept compact once cancelled (includes/retain.lua): the payload is gone, and says so.
    assert "payload:          (not kept: a compact finished record" in run("task", "show", task.id)
    with pytest.raises(CommandError, match="not found"):
        run("task", "show", "nope")


def test_a_dead_lettered_task_shows_its_errors(live_engine: Engine) -> None:
    [task_id] = make_dead_letters(live_engine, 1, message="kaboom")
    shown = run("task", "show", task_id)
    assert "DEAD_LETTERED" in shown and "kaboom" in shown and "dlq_entry_id:" in shown


# -- the process: exit codes and one line --------------------------------------------------------

def manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=False, timeout=60)


@pytest.mark.parametrize("args", [("dlq", "list", "--limit", "0"), ("dlq",), ("dlq", "retry")])
def test_bad_input_exits_non_zero_with_one_line(redis_server: RedisServer, key_prefix: str,
                                                args: tuple[str, ...]) -> None:
    proc = manage(*args, env=worker_env(redis_server.url, key_prefix))
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("args", [("dlq", "list", "--limit", "x"), ("task", "explode", "x"), ("task",),
                                  ("queue", "purge"), ("dlq", "list", "--colour")])
def test_bad_arguments_raise_a_command_error_in_process(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^Error: "):
        run(*args)


def test_redis_down_exits_1_with_one_line_naming_it() -> None:
    env = worker_env("redis://:hunter2@127.0.0.1:1/0", "dtqtest:down")
    for args in (("dlq", "list"), ("queue", "pause", "q")):
        proc = manage(*args, env=env)
        assert proc.returncode == 1, proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert line.startswith("CommandError: cannot reach Redis at redis://:***@127.0.0.1:1/0")
        assert "hunter2" not in line


def test_a_queue_filter_that_cannot_exist_exits_2_as_bad_arguments(redis_server: RedisServer, key_prefix: str) -> None:
    for args in (("dlq", "retry", "--all", "--queue", "Default"), ("dlq", "list", "--queue", "dlq")):
        proc = manage(*args, env=worker_env(redis_server.url, key_prefix))
        assert proc.returncode == 2 and proc.stdout == "", proc.stderr
        [line] = proc.stderr.strip().splitlines()
        assert "argument --queue:" in line and "is not a queue name" in line


def test_a_database_redis_does_not_have_exits_1_naming_the_variable(redis_server: RedisServer) -> None:
    # Found only on connect (Redis has 16 databases by default), so this is not a start-up check.
    url = redis_server.url.rsplit("/", 1)[0].replace("redis://", "redis://:hunter2@") + "/99"
    for args in (("queue", "list"), ("runworker_dtq", "--burst")):
        proc = manage(*args, env=worker_env(url, "dtqtest:wrongdb"))
        assert proc.returncode == 1, proc.stderr
        line = proc.stderr.strip().splitlines()[-1]
        assert line.startswith("CommandError: DTQ_REDIS_URL names a database this Redis does not have"), proc.stderr
        assert "Traceback" not in proc.stderr and "hunter2" not in proc.stderr


TASK_ID = f"ab12cd-{'0' * 32}"  # a possible task id: one that could not be is refused without Redis


@pytest.mark.parametrize("args", [("dlq", "show", "abc-1-0"), ("dlq", "retry", "--all"), ("dlq", "discard", "abc-1-0"),
                                  ("queue", "list"), ("queue", "purge", "q"), ("task", "show", TASK_ID),
                                  ("task", "cancel", TASK_ID)])
def test_every_command_says_when_redis_is_down(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^cannot reach Redis at redis://127.0.0.1:1/0"):
        run(*args)


def test_no_open_api_warning_is_printed_on_an_operator_terminal(redis_server: RedisServer, key_prefix: str) -> None:
    proc = manage("queue", "list", "--json", env=worker_env(redis_server.url, key_prefix, DJANGO_DEBUG="false"))
    assert proc.returncode == 0 and json.loads(proc.stdout) == [] and "dtq.W001" not in proc.stderr


