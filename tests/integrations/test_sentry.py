"""Sentry (issue 25) with the real sentry-sdk in a real worker process, events caught by its own
transport hook: a permanent failure is one event, tagged and fingerprinted, its payload scrubbed by
the project's before_send; a retry that then succeeds is none; a task that dead-letters after two
attempts is one; with DTQ_SENTRY_REPORT_RETRIES every failing attempt is one."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dtq_core.config import ConfigError, DtqConfig
from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for
from ..failure.support import FAST


def run(engine: Engine, start_worker: Callable[..., WorkerProcess], events_file: Path, **env: Any
        ) -> dict[str, list[dict[str, Any]]]:
    ids = {"permanent": engine.tasks.enqueue("sentry.permanent", {"order": 7, "card": "4111-1111"}, queue="s").id,
           "once": engine.tasks.enqueue("sentry.once", queue="s", max_attempts=3).id,
           "always": engine.tasks.enqueue("sentry.always", queue="s", max_attempts=2).id}
    worker = start_worker("--name", "sentry", "--queues", "s", **{
        **FAST, "DTQ_TASK_MODULES": "tests.integrations.sentry_setup", "DTQ_TEST_SENTRY": str(events_file), **env})
    final = {"permanent": "DEAD_LETTERED", "once": "SUCCEEDED", "always": "DEAD_LETTERED"}
    for name, task_id in ids.items():
        wait_for(lambda t=task_id, n=name: engine.tasks.get(t)["status"] == final[n], timeout=20,
                 message=worker.output)
    worker.proc.terminate()  # SIGTERM: a drained worker, and sentry-sdk flushes what it queued at exit
    assert worker.wait(timeout=30) == 0
    events = [json.loads(line) for line in events_file.read_text().splitlines()] if events_file.exists() else []
    return {name: [e for e in events if e["tags"].get("dtq.task_id") == task_id] for name, task_id in ids.items()}


def test_permanent_failures_and_dead_letters_are_reported_once(
        live_engine: Engine, settings: Any, tmp_path: Path, start_worker: Callable[..., WorkerProcess]) -> None:
    settings.DTQ = {**settings.DTQ, "ACCEPT_UNKNOWN_TYPES": True}
    events = run(live_engine, start_worker, tmp_path / "events.jsonl")
    assert [len(events[n]) for n in ("permanent", "once", "always")] == [1, 0, 1]
    [event] = events["permanent"]
    assert event["tags"] == {"dtq.task_id": event["tags"]["dtq.task_id"], "dtq.task_type": "sentry.permanent",
                             "dtq.queue": "s", "dtq.attempt": "1"}
    assert event["fingerprint"] == ["dtq", "sentry.permanent", "builtins.ValueError"]
    assert event["exception"]["values"][-1]["type"] == "ValueError"
    assert event["exception"]["values"][-1]["value"] == "bad input 7"
    assert event["contexts"]["dtq task"]["payload"] == "[scrubbed]"  # the project's before_send ran
    [dead] = events["always"]
    assert dead["tags"]["dtq.attempt"] == "2" and dead["contexts"]["dtq task"]["final"] is True
    assert dead["fingerprint"] == ["dtq", "sentry.always", "dtq_core.registry.RetryableError"]


def test_reporting_retries_reports_every_failing_attempt(
        live_engine: Engine, settings: Any, tmp_path: Path, start_worker: Callable[..., WorkerProcess]) -> None:
    settings.DTQ = {**settings.DTQ, "ACCEPT_UNKNOWN_TYPES": True}
    events = run(live_engine, start_worker, tmp_path / "events.jsonl", DTQ_SENTRY_REPORT_RETRIES="true")
    assert [len(events[n]) for n in ("permanent", "once", "always")] == [1, 1, 2]
    assert events["once"][0]["contexts"]["dtq task"]["final"] is False
    assert sorted(e["tags"]["dtq.attempt"] for e in events["always"]) == ["1", "2"]


def test_off_reports_nothing(live_engine: Engine, settings: Any, tmp_path: Path,
                             start_worker: Callable[..., WorkerProcess]) -> None:
    settings.DTQ = {**settings.DTQ, "ACCEPT_UNKNOWN_TYPES": True}
    events = run(live_engine, start_worker, tmp_path / "events.jsonl", DTQ_SENTRY="off")
    assert [len(events[n]) for n in ("permanent", "once", "always")] == [0, 0, 0]
    with pytest.raises(ConfigError, match="DTQ_SENTRY must be auto or off"):
        DtqConfig(sentry="yes")
