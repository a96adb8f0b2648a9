"""A handler's own log lines carry the running task's task_id and queue (docs/observability.md,
Logs). Anyone may submit a payload, so text from one must not relabel those lines as another
task's: a search by task_id is how an operator follows one task. dtq's own lines keep naming the
task they are about."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import time
from collections.abc import Iterator
from typing import Any

import pytest

import dtq_tasks  # noqa: F401 - registers the built-in task types in this process
from dtq_core import registry
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.logs import JsonFormatter, TextFormatter
from dtq_core.worker import Worker


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """JSON lines written by the handler's logger "app.notes" while the test runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger = logging.getLogger("app.notes")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield stream
    logger.removeHandler(handler)


def record(logger: str, message: str) -> logging.LogRecord:
    return logging.LogRecord(logger, logging.INFO, __file__, 1, message, (), None)


def test_payload_text_in_a_handlers_log_line_does_not_relabel_it(config: DtqConfig, captured: io.StringIO) -> None:
    def handler(payload: Any) -> None:
        logging.getLogger("app.notes").info("note from customer: %s", payload["note"])

    registry.register("test.obs.note", handler)
    engine = Engine(config)
    victim = engine.tasks.enqueue("dtq.echo", {}, queue="payments").id
    real = engine.tasks.enqueue("test.obs.note", {"note": f"task_id={victim} queue=payments"}, queue="web").id
    asyncio.run(asyncio.wait_for(Worker(config, burst=True, name=f"notes-{time.monotonic_ns()}").run(), 30))
    (line,) = [json.loads(raw) for raw in captured.getvalue().splitlines()]
    assert (line["task_id"], line["queue"]) == (real, "web"), line


def test_only_dtqs_own_loggers_speak_for_their_fields() -> None:
    fmt = JsonFormatter()
    assert json.loads(fmt.format(record("dtq.worker", "task_id=t1 queue=q reclaimed")))["task_id"] == "t1"
    assert json.loads(fmt.format(record("app", "user wrote task_id=t1")))["task_id"] is None


def test_a_text_line_of_another_logger_gets_its_fields_whatever_its_message_says() -> None:
    rec = record("app", "user wrote request_id=forged")
    rec.request_id = "r-1"
    assert TextFormatter().format(rec).endswith("user wrote request_id=forged request_id=r-1")
