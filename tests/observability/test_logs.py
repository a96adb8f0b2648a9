"""Structured logs: JSON lines with DTQ_LOG_FORMAT=json, readable text otherwise, both with the
task_id, queue, attempt, worker_id and request_id fields."""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client

import dtq_tasks  # noqa: F401 - registers the built-in task types in this process
from dtq_core import registry
from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.logs import FIELDS, JsonFormatter, TextFormatter
from dtq_core.worker import Worker

from ..conftest import ROOT


def record(message: str, *args: Any, level: int = logging.INFO, **extra: Any) -> logging.LogRecord:
    rec = logging.LogRecord("dtq.test", level, __file__, 1, message, args, None)
    rec.__dict__.update(extra)
    return rec


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    """JSON lines written by loggers "app" and "dtq.metrics" while the test runs."""
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    loggers = [logging.getLogger("app"), logging.getLogger("dtq.metrics")]
    for logger in loggers:
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
    yield stream
    for logger in loggers:
        logger.removeHandler(handler)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def test_json_lines_carry_every_field_from_extra_and_from_key_value_messages() -> None:
    fmt = JsonFormatter()
    line = json.loads(fmt.format(record("task_id=%s attempt=%d worker_id=%s reclaimed", "t1", 3, "h:1")))
    assert line["task_id"] == "t1" and line["attempt"] == 3 and line["worker_id"] == "h:1"
    assert line["queue"] is None and line["request_id"] is None  # always present, null when unknown
    assert set(FIELDS) <= set(line) and line["level"] == "INFO" and line["logger"] == "dtq.test"
    assert line["ts"].endswith("Z") and line["message"] == "task_id=t1 attempt=3 worker_id=h:1 reclaimed"
    # extra= wins over the message text.
    line = json.loads(fmt.format(record("queue=a done", queue="b", request_id="r-1")))
    assert line["queue"] == "b" and line["request_id"] == "r-1"


def test_json_lines_stay_one_line_with_a_traceback() -> None:
    try:
        raise ValueError("boom\nsecond line")
    except ValueError:
        rec = logging.LogRecord("dtq.test", logging.ERROR, __file__, 1, "failed task_id=x", (), sys.exc_info())
    text = JsonFormatter().format(rec)
    assert "\n" not in text
    line = json.loads(text)
    assert "ValueError: boom" in line["exc_info"] and line["task_id"] == "x"


def test_text_lines_add_only_the_fields_the_message_lacks() -> None:
    text = TextFormatter().format(record("worker_id=w1 took scheduler leadership", request_id="r-9"))
    assert text.endswith("INFO dtq.test worker_id=w1 took scheduler leadership request_id=r-9")
    assert TextFormatter().format(record("plain")).endswith("INFO dtq.test plain")


def test_a_handler_error_with_newlines_is_one_text_log_line(config: DtqConfig) -> None:
    # It should: a handler's error text cannot forge log lines (text format): the worker's
    # "moved to the DLQ" line carries it escaped, on one line.
    def forger(payload: Any) -> None:
        raise ValueError("x\nFAKE line 2026-12-01 ERROR dtq.worker all good\r\x1b[2K")

    registry.register("test.obs.forger", forger)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("dtq.worker")
    logger.addHandler(handler)
    try:
        task_id = Engine(config).tasks.enqueue("test.obs.forger").id
        asyncio.run(asyncio.wait_for(Worker(config, burst=True, name=f"logs-{time.monotonic_ns()}").run(), 30))
    finally:
        logger.removeHandler(handler)
    written = stream.getvalue().splitlines()
    (line,) = [line for line in written if "FAKE" in line]
    assert f"task_id={task_id}" in line and "moved to the DLQ" in line
    assert "ValueError: x\\nFAKE line" in line and "\\r\\x1b[2K" in line
    assert all(line[:4].isdigit() for line in written)  # every line starts with its timestamp


def test_a_request_id_reaches_log_lines_written_during_the_request(captured: io.StringIO) -> None:
    # Redis is down (dead port): the scrape logs a warning while serving the request.
    response = Client().get("/metrics", headers={"X-Request-ID": "req-123"})
    assert response.status_code == 200
    warnings = [line for line in lines(captured) if line["logger"] == "dtq.metrics"]
    assert warnings and all(line["request_id"] == "req-123" for line in warnings)
    assert warnings[0]["level"] == "WARNING" and "could not read Redis" in warnings[0]["message"]


def test_handler_log_lines_carry_the_running_task(config: DtqConfig, captured: io.StringIO) -> None:
    async def async_handler(payload: Any) -> None:
        logging.getLogger("app").info("charging card %s", payload["card"])

    def sync_handler(payload: Any) -> None:
        logging.getLogger("app").info("sending mail", extra={"request_id": payload["rid"]})

    registry.register("test.obs.async_logs", async_handler)
    registry.register("test.obs.sync_logs", sync_handler)
    engine = Engine(config)
    a = engine.tasks.enqueue("test.obs.async_logs", {"card": 42}, queue="billing").id
    s = engine.tasks.enqueue("test.obs.sync_logs", {"rid": "r-7"}, queue="mail").id
    worker = Worker(config, burst=True, name=f"logs-{time.monotonic_ns()}")
    asyncio.run(asyncio.wait_for(worker.run(), 30))

    by_message = {line["message"]: line for line in lines(captured)}
    charged, mailed = by_message["charging card 42"], by_message["sending mail"]
    assert (charged["task_id"], charged["queue"], charged["attempt"], charged["worker_id"]) == \
        (a, "billing", 1, worker.worker_id)
    assert (mailed["task_id"], mailed["queue"], mailed["request_id"]) == (s, "mail", "r-7")


def manage(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "manage.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "DJANGO_SETTINGS_MODULE": "dtq_site.settings",
                               "DTQ_REDIS_URL": "redis://127.0.0.1:1/0", **env})


def test_dtq_log_format_json_makes_every_log_line_json() -> None:
    code = "import logging; logging.getLogger('dtq.worker').warning('task_id=%s queue=%s moved', 'abc', 'q')"
    done = manage("shell", "-c", code, DTQ_LOG_FORMAT="json")
    assert done.returncode == 0, done.stderr
    line = json.loads(done.stderr.strip().splitlines()[-1])
    assert line["task_id"] == "abc" and line["queue"] == "q" and line["level"] == "WARNING"


@pytest.mark.parametrize("value", ["xml", "j" * 5000])
def test_an_invalid_log_format_stops_with_one_line(value: str) -> None:
    done = manage("check", DTQ_LOG_FORMAT=value)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "DTQ_LOG_FORMAT must be text or json" in done.stderr


@pytest.mark.parametrize("value", ["LOUD", "5"])
def test_an_invalid_log_level_stops_with_one_line(value: str) -> None:
    done = manage("check", DTQ_LOG_LEVEL=value)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1 and "DTQ_LOG_LEVEL must be DEBUG, INFO" in done.stderr


def test_the_log_level_is_read_in_any_case() -> None:
    code = "import logging; logging.getLogger('dtq.worker').info('worker_id=w1 quiet')"
    done = manage("shell", "-c", code, DTQ_LOG_LEVEL="warning")
    assert done.returncode == 0 and "quiet" not in done.stderr, done.stderr


def test_an_empty_log_format_means_text() -> None:
    code = "import logging; logging.getLogger('dtq.worker').warning('worker_id=w1 hello')"
    done = manage("shell", "-c", code, DTQ_LOG_FORMAT=" ")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("WARNING dtq.worker worker_id=w1 hello")
