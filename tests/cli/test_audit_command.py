"""manage.py audit list: the trail as a table or JSON, filtered, with unfinished actions flagged."""

from __future__ import annotations

import json
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def test_audit_list_shows_each_action_once_and_flags_an_unfinished_one(live_engine: Engine) -> None:
    live_engine.tasks.enqueue("dtq.echo", queue="mail")
    live_engine.queues.pause("mail", Actor.cli())
    # What a process killed mid-way through a bulk discard leaves: an intent and progress, no outcome.
    cut = live_engine.audit.start(Actor.user("alice", source="console"), "dlq.discard", "dlq:all", selected=9000,
                                  selection={"all": True})
    cut.advance(4000)
    table, notes = run("audit", "list")
    header, newest, oldest = table.splitlines()
    assert header.split()[:4] == ["WHEN", "ACTOR", "SOURCE", "ACTION"]
    assert "user:alice" in newest and "UNFINISHED (4000 of 9000)" in newest
    assert "queue.pause" in oldest and "finished" in oldest
    assert "1 unfinished" in notes
    rows = json.loads(run("audit", "list", "--source", "cli", "--json")[0])
    assert [(r["action"], r["outcome"], r["count"]) for r in rows] == [("queue.pause", "finished", 1)]
    assert run("audit", "list", "--action", "dlq.retry")[0].splitlines() == [
        "WHEN  ACTOR  SOURCE  ACTION  TARGET  COUNT  OUTCOME  REQUEST ID"]


def test_audit_list_refuses_a_bad_source_in_one_line() -> None:
    with pytest.raises(CommandError, match="source"):
        run("audit", "list", "--source", "email")
