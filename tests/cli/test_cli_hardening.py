"""The operator CLI under the failures an on-call operator meets: a least-privilege Redis user or a
wrong password, dead letters that cannot be retried, damaged records, Ctrl-C and a Redis dying
mid-action, a lost worker, a dropped terminal, a scratch script in the working directory and a
spoofed $USER. Each ends in one line on stderr and an exit code that tells the truth."""

from __future__ import annotations

import os
import pwd
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError
from rest_framework.test import APIClient

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.engine.dlq import DlqSelection, RetryOutcome
from dtq_core.redis_errors import AUTH_FAILED, NO_PERMISSION, translate

from ..api.support import assert_error, make_dead_letters
from ..conftest import ROOT, WorkerProcess, wait_for, worker_env
from ..redis_server import RedisServer

BIG = 200_000  # dead letters: a bulk action over them runs for seconds, long enough to interrupt


def dtq(*args: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(ROOT / "bin" / "dtq"), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          check=False, timeout=120)


def start_dtq(*args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([str(ROOT / "bin" / "dtq"), *args], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def fill_dlq(engine: Engine, queue: str, count: int) -> None:
    """Write `count` dead letters straight into the queue's DLQ stream (no tasks behind them)."""
    [tag] = engine.registry.ensure(queue).tags
    pipe = engine.client.pipeline(transaction=False)
    for i in range(count):
        pipe.xadd(engine.keys.dlq(tag), {"task_id": f"{tag}-{i:032x}", "queue": queue, "type": "dtq.fail",
                                         "attempt": 1, "error_class": "E", "error": "x", "failed_at": 1})
        if i % 10_000 == 9_999:
            pipe.execute()
    pipe.execute()


def wait_until_acting(engine: Engine, proc: subprocess.Popen[str]) -> None:
    """Return once a bulk action has recorded progress: it is inside its audited block, changing
    things now. (Its intent alone is written a moment before the block starts: a Ctrl-C in that
    moment, under load, cuts short nothing yet.)"""
    first: dict[str, str] = {}  # op id -> its intent's progress as startAudit wrote it

    def progressed() -> bool:  # a round trip of the block recorded progress (op.advance), if any
        for op_id, raw in engine.client.hgetall(engine.keys.audit_open()).items():
            if first.setdefault(op_id, raw) != raw:
                return True
        return proc.poll() is not None

    wait_for(progressed, timeout=60, interval=0.005)
    assert proc.poll() is None, "the action ended before it could be cut short"


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr[-800:]
    return lines[0]


# -- a Redis user that is refused -----------------------------------------------------------

@pytest.fixture
def read_only_user(redis_server: RedisServer, redis_client: redis.Redis) -> Iterator[str]:
    """A least-privilege Redis user (reads only), as a security team hands an on-call operator;
    yields the test Redis's URL logged in as it."""
    redis_client.execute_command("ACL", "SETUSER", "dtq_ro", "reset", "on", ">ropw", "~*", "&*",
                                 "+@read", "+@connection", "+info", "+client")
    yield redis_server.url.replace("redis://", "redis://dtq_ro:ropw@")
    redis_client.execute_command("ACL", "DELUSER", "dtq_ro")


def test_a_user_without_script_permission_gets_one_line_naming_the_denied_command(
        read_only_user: str, key_prefix: str) -> None:
    proc = dtq("queue", "pause", "work", env=worker_env(read_only_user, key_prefix))
    assert proc.returncode == 1
    assert one_line(proc.stderr) == ("CommandError: Redis's ACL denies dtq's user the EVALSHA command: "
                                     f"{read_only_user.replace(':ropw@', ':***@')}")


def test_a_wrong_password_says_authentication_failed_not_unreachable(
        redis_server: RedisServer, key_prefix: str) -> None:
    url = redis_server.url.replace("redis://", "redis://nobody:wrong@")
    proc = dtq("queue", "list", env=worker_env(url, key_prefix))
    line = one_line(proc.stderr)
    assert proc.returncode == 1 and "cannot reach" not in line, line
    assert line.startswith("CommandError: Redis refused dtq's credentials (authentication failed) at "
                           "redis://nobody:***@"), line


@pytest.mark.parametrize(("error", "kind", "message"), [
    (redis.exceptions.NoPermissionError("User dtq_ro has no permissions to run the 'evalsha' command"),
     NO_PERMISSION, "Redis's ACL denies dtq's user the EVALSHA command; grant it to the user in DTQ_REDIS_URL"),
    (redis.exceptions.ResponseError("The user executing the script can't run this command or subcommand "
                                    "script: 67ed14c1, on @user_script:1."),
     NO_PERMISSION, "Redis's ACL denies dtq's user a command or key dtq uses; grant it to the user in DTQ_REDIS_URL"),
    (redis.exceptions.AuthenticationError("invalid username-password pair or user is disabled."),
     AUTH_FAILED, "Redis refused dtq's credentials (authentication failed); check the user and password in "
                  "DTQ_REDIS_URL"),
])
def test_refused_credentials_and_permissions_are_redis_unavailable_with_their_reason(
        error: Exception, kind: str, message: str) -> None:
    trouble = translate(error)
    assert trouble is not None
    assert (trouble.code, trouble.http_status, trouble.kind, trouble.message) == ("REDIS_UNAVAILABLE", 503, kind,
                                                                                  message)
    assert "dtq_ro" not in trouble.message  # the Redis user's name stays out of what API clients read


def test_the_api_answers_a_denied_command_with_its_envelope_not_a_500(
        read_only_user: str, anonymous_admin: Any) -> None:
    anonymous_admin.DTQ = {**anonymous_admin.DTQ, "REDIS_URL": read_only_user}
    error = assert_error(APIClient().post("/api/v1/queues/work/pause"), 503, "REDIS_UNAVAILABLE")
    assert "EVALSHA" in error["message"], error


# -- retry-dlq says what it did not retry ----------------------------------------------------------

def expire_task_of(engine: Engine, task_id: str) -> str:
    """Delete a dead letter's task record (its retention ran out); return the dead letter's id."""
    entry = str(engine.tasks.get(task_id)["dlq_entry_id"])
    engine.client.delete(engine.keys.task(task_id))
    return entry


def typo_of(entry: str) -> str:
    """A well-formed dead-letter id next to `entry` with no dead letter behind it."""
    tag, ms, seq = entry.rsplit("-", 2)
    return f"{tag}-{int(ms) + 1}-{seq}"


def test_retrying_a_dead_letter_whose_task_expired_fails_and_points_to_discard(live_engine: Engine) -> None:
    [task_id] = make_dead_letters(live_engine, 1, queue="mail")
    entry = expire_task_of(live_engine, task_id)
    out = StringIO()
    call_command("dlq", "retry", entry, "--dry-run", stdout=out)
    assert out.getvalue().strip() == "would retry 1 dead letter(s)"  # it is there to be tried
    out = StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("dlq", "retry", entry, stdout=out, stderr=StringIO())
    assert out.getvalue().strip() == "retried 0 dead letter(s)"
    assert refused.value.returncode == 1
    assert str(refused.value) == (f"not all retried: kept {entry}: the task record expired (DTQ_TASK_RETENTION_S), "
                                  f"so there is nothing to requeue; drop with `dtq discard-dlq {entry}`")
    assert [i["entry_id"] for i in live_engine.dlq.list().items] == [entry]


def test_retrying_ids_one_of_which_is_no_dead_letter_names_it_and_fails(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str) -> None:
    [task_id] = make_dead_letters(live_engine, 1, queue="mail")
    entry = live_engine.tasks.get(task_id)["dlq_entry_id"]
    typo = typo_of(entry)
    env = worker_env(redis_server.url, key_prefix)
    alone = dtq("retry-dlq", typo, env=env)
    assert alone.returncode == 1 and one_line(alone.stderr) == f"CommandError: no dead letter with id {typo}"
    both = dtq("retry-dlq", entry, typo, env=env)
    assert both.stdout.strip() == "retried 1 dead letter(s)"  # the good one is retried ...
    assert both.returncode == 1  # ... and the typo does not pass silently
    assert one_line(both.stderr) == f"CommandError: not all retried: no dead letter with id {typo}"


def test_retrying_all_with_some_tasks_expired_fails_saying_how_many_stay(live_engine: Engine) -> None:
    ids = make_dead_letters(live_engine, 3, queue="mail")
    expire_task_of(live_engine, ids[0])
    out = StringIO()
    with pytest.raises(CommandError, match=r"^1 dead letter\(s\) kept: the task record expired .* "
                                           r"drop them with `dtq discard-dlq ID\.\.\.`$"):
        call_command("dlq", "retry", "--all", stdout=out, stderr=StringIO())
    assert out.getvalue().strip() == "retried 2 dead letter(s)"


def test_the_engine_counts_what_a_retry_kept_and_did_not_find(live_engine: Engine) -> None:
    ids = make_dead_letters(live_engine, 3, queue="mail")
    entries = [live_engine.tasks.get(t)["dlq_entry_id"] for t in ids]
    expire_task_of(live_engine, ids[0])
    outcome = live_engine.dlq.retry_outcome(DlqSelection(ids=(*entries, typo_of(entries[2]))), Actor.cli())
    assert outcome == RetryOutcome(retried=2, not_found=1, kept=1)


def test_a_malformed_type_filter_exits_2_like_a_malformed_queue_filter(
        redis_server: RedisServer, key_prefix: str) -> None:
    env = worker_env(redis_server.url, key_prefix)
    queue = dtq("dlq", "retry", "--all", "--queue", "Not A Queue", env=env)
    kind = dtq("dlq", "retry", "--all", "--type", "not a type!", env=env)
    assert (queue.returncode, kind.returncode, kind.stdout) == (2, 2, "")
    assert one_line(kind.stderr).endswith("argument --type: 'not a type!' is not a task type "
                                          "(1-200 of letters, digits and _ . : -)")


# -- damaged records -----------------------------------------------------------------------------

def test_one_malformed_dead_letter_does_not_break_dlq_list_and_bulk_discard(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str) -> None:
    make_dead_letters(live_engine, 2, queue="mail")
    [tag] = live_engine.registry.ensure("mail").tags
    # One entry with a field that is not a number (written by hand, or by another tool).
    live_engine.client.xadd(live_engine.keys.dlq(tag), {"task_id": f"{tag}-{'0' * 32}", "queue": "mail",
                                                         "type": "dtq.fail", "attempt": "x", "error_class": "E",
                                                         "error": "e", "failed_at": "1"})
    env = worker_env(redis_server.url, key_prefix)
    listing = dtq("dlq", "list", env=env)
    assert listing.returncode == 0 and "Traceback" not in listing.stderr, listing.stderr[-800:]
    discard = dtq("discard-dlq", "--all", env=env)
    assert (discard.returncode, discard.stdout.strip()) == (0, "discarded 3 dead letter(s)"), discard.stderr[-800:]


def test_task_show_of_a_record_with_a_malformed_field_shows_it_as_damaged(live_engine: Engine) -> None:
    task = live_engine.tasks.enqueue("dtq.echo", {"a": 1}, queue="t")
    live_engine.client.hset(live_engine.keys.task(task.id), mapping={"attempt": "x", "created_at": "soon"})
    out = StringIO()
    call_command("task", "show", task.id, stdout=out)
    assert "damaged:          attempt='x', created_at='soon'" in out.getvalue()
    response = APIClient().get(f"/api/v1/tasks/{task.id}")  # the API's task detail: no 500 either
    assert response.status_code == 200
    shown = response.json()
    assert {k: shown[k] for k in ("attempt", "attempt_corrupt", "created_at", "created_at_corrupt", "damaged")} \
        == {"attempt": None, "attempt_corrupt": "x", "created_at": None, "created_at_corrupt": "soon",
            "damaged": True}


# -- cut short: Ctrl-C, a Redis that dies ------------------------------------------------------------

def test_ctrl_c_during_a_bulk_discard_is_one_line_with_its_progress_and_exit_130(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str) -> None:
    fill_dlq(live_engine, "big", BIG)
    proc = start_dtq("discard-dlq", "--all", env=worker_env(redis_server.url, key_prefix))
    wait_until_acting(live_engine, proc)
    proc.send_signal(signal.SIGINT)  # the operator's Ctrl-C
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert re.fullmatch(r"dtq: interrupted: dlq\.discard stopped after [\d,]+ of 200,000; "
                        r"run the command again to finish", one_line(err)), err
    [row] = live_engine.audit.list(action="dlq.discard").items
    assert row["outcome"] == "failed" and row["error"] == "KeyboardInterrupt"  # the trail says so too


def test_ctrl_c_while_a_worker_starts_is_one_line_and_exit_130(
        redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> None:
    # A task module slow to import holds the start where Ctrl-C lands (before signals drain).
    started = tmp_path / "importing"
    (tmp_path / "slow_tasks.py").write_text(f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\n"
                                            "time.sleep(60)\n")
    env = worker_env(redis_server.url, key_prefix, DTQ_TASK_MODULES="slow_tasks", PYTHONPATH=str(tmp_path))
    proc = start_dtq("runworker_dtq", "--name", "ctrl-c", env=env)
    wait_for(started.exists, timeout=60, message=lambda: proc.stderr.read() if proc.poll() is not None else "")
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert one_line(err) == "CommandError: interrupted while starting: the worker had not started serving"


def test_redis_dying_mid_bulk_retry_is_one_line_saying_how_far_it_got(tmp_path: Path) -> None:
    with RedisServer(tmp_path / "redis", appendonly=False) as server:
        engine = Engine(DtqConfig(redis_url=server.url, key_prefix="dies"))
        fill_dlq(engine, "big", BIG)
        proc = start_dtq("retry-dlq", "--all", env=worker_env(server.url, "dies"))
        wait_until_acting(engine, proc)
        server.process.kill()  # the OOM killer, a host failure
        server.process.wait(10)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and out == ""
    # docs/cli.md: "Every failure is one line on stderr": the audit warning is folded into it.
    assert re.fullmatch(rf"CommandError: cannot reach Redis at {re.escape(server.url)}: .*; dlq\.retry stopped "
                        r"after [\d,]+ of 200,000 \(its audit entry stays unfinished\)", one_line(err)), err


# -- workers ----------------------------------------------------------------------------------------

def test_stopping_a_lost_worker_is_refused_as_it_would_never_drain(
        live_engine: Engine, anonymous_admin: Any) -> None:
    # A worker whose heartbeats stopped a minute ago (SIGKILLed, its host lost), its record not yet expired.
    beat = live_engine.clock.now_ms() - 60_000
    live_engine.client.zadd(live_engine.keys.workers(), {"gone-w": beat})
    live_engine.client.hset(live_engine.keys.worker("gone-w"), mapping={"heartbeat_at": beat, "pid": 1})
    [row] = [w for w in live_engine.workers.list() if w["id"] == "gone-w"]
    assert row["state"] == "lost"
    with pytest.raises(CommandError, match=r"^worker 'gone-w' is lost: no heartbeat for 6\ds \(past the \d+s "
                                           r"visibility timeout\), so it cannot be told to stop"):
        call_command("worker", "stop", "gone-w", stdout=StringIO())
    assert_error(APIClient().post("/api/v1/workers/gone-w/quiet"), 404, "WORKER_NOT_FOUND")
    assert live_engine.client.hget(live_engine.keys.worker("gone-w"), "control") is None  # not told
    assert not live_engine.audit.list(action="worker.stop").items  # a refusal is not audited


def test_stopping_a_sigkilled_worker_does_not_claim_it_will_drain_and_exit(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str, start_worker: Any) -> None:
    worker = start_worker("--name", "killed-w", DTQ_VISIBILITY_TIMEOUT_S=2, DTQ_HEARTBEAT_INTERVAL_S=0.5)
    wait_for(lambda: any(w["id"] == "killed-w" for w in live_engine.workers.list()), timeout=30,
             message=worker.output)
    worker.kill()  # SIGKILL: an OOM kill, a lost host
    wait_for(lambda: [w["state"] for w in live_engine.workers.list() if w["id"] == "killed-w"] == ["lost"],
             timeout=30)
    proc = dtq("worker", "stop", "killed-w", env=worker_env(redis_server.url, key_prefix))
    assert proc.returncode == 1 and proc.stdout == ""
    assert "is lost" in one_line(proc.stderr)


def test_a_terminal_hangup_drains_the_worker_like_sigterm(live_engine: Engine, redis_server: RedisServer,
                                                          key_prefix: str, tmp_path: Path) -> None:
    # `dtq runworker_dtq` started by hand in an ssh session: the connection drops, the kernel sends
    # SIGHUP. The hangup's default disposition, as a login shell gives its children (the suite
    # itself may run under nohup, whose ignored SIGHUP every child would inherit).
    worker = WorkerProcess(["--name", "hup-w"], worker_env(redis_server.url, key_prefix), tmp_path / "w.log",
                           preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))
    try:
        wait_for(lambda: "started queues=" in worker.output() or worker.proc.poll() is not None, timeout=30)
        worker.proc.send_signal(signal.SIGHUP)
        worker.proc.send_signal(signal.SIGHUP)  # the shell's and the kernel's: a hangup often comes twice
        assert worker.wait(timeout=60) == 0, worker.output()[-600:]
        # Drained: deregistered and exited 0. Killed by the signal, it would stay listed until its
        # heartbeat went stale.
        assert [w for w in live_engine.workers.list() if w["id"] == "hup-w"] == []
        assert "got SIGHUP" in worker.output() and "second signal" not in worker.output()
    finally:
        worker.kill()


def test_a_worker_started_with_nohup_ignores_the_hangup(
        redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> None:
    worker = WorkerProcess(["--name", "nohup-w"], worker_env(redis_server.url, key_prefix), tmp_path / "w.log",
                           preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN))
    try:
        wait_for(lambda: "started queues=" in worker.output() or worker.proc.poll() is not None, timeout=30)
        worker.proc.send_signal(signal.SIGHUP)
        time.sleep(1)
        assert worker.proc.poll() is None and "got SIGHUP" not in worker.output()
    finally:
        worker.kill()


# -- bin/dtq and the audit actor ------------------------------------------------------------------------

def test_bin_dtq_does_not_run_a_script_in_the_working_directory_named_like_a_dependency(
        redis_server: RedisServer, key_prefix: str, tmp_path: Path) -> None:
    # docs/cli.md: bin/dtq "works from any directory". An operator's home with a scratch redis.py:
    (tmp_path / "redis.py").write_text("print('the scratch script ran')\n")
    proc = dtq("queue", "list", "--json", env=worker_env(redis_server.url, key_prefix), cwd=tmp_path)
    assert "the scratch script ran" not in proc.stdout
    assert (proc.returncode, proc.stdout.strip()) == (0, "[]"), proc.stderr[-600:]


def test_the_audit_actor_is_the_os_user_not_whatever_user_says(
        live_engine: Engine, redis_server: RedisServer, key_prefix: str) -> None:
    env = {**worker_env(redis_server.url, key_prefix), "USER": "ceo", "LOGNAME": "ceo"}
    proc = dtq("queue", "pause", "work", env=env)
    assert proc.returncode == 0, proc.stderr
    # docs/cli.md: audited "with actor cli:<os user>"; the process runs as this uid, not as "ceo".
    assert live_engine.audit.list(limit=1).items[0]["actor"] == f"cli:{pwd.getpwuid(os.geteuid()).pw_name}"


def test_the_console_says_to_fix_the_setting_for_a_refused_user(redis_server: RedisServer, settings: Any,
                                                                key_prefix: str, db: Any) -> None:
    from django.test import Client

    settings.DTQ = {**settings.DTQ, "REDIS_URL": redis_server.url.replace("redis://", "redis://nobody:wrong@"),
                    "KEY_PREFIX": key_prefix}
    page = Client().get("/")
    text = page.content.decode()
    assert page.status_code == 503 and "authentication failed" in text and "fix the setting" in text, text[:600]
