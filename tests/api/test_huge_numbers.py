"""Huge integer timing fields: a JSON number with many digits is a Python int that math.isfinite /
float() cannot convert (OverflowError): it is a 400 naming the field, never a 500, and a handler's
huge retry_after is ignored like any other out-of-range value."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.errors import ValidationError

from ..conftest import WorkerProcess, wait_for
from ..failure.support import env, execs, status, task
from .support import assert_error

HUGE = 10 ** 400  # a valid JSON integer ("1" followed by 400 zeros)


TIMING = ["delay_seconds", "ttl_seconds", "max_attempts", "timeout_seconds", "unique_window_s"]


@pytest.mark.parametrize("field", TIMING)
def test_a_huge_integer_timing_field_is_a_validation_error_not_an_overflow(live_engine: Engine, field: str) -> None:
    # docs/tasks.md: delay_seconds 0..366 days etc.; out of range is ValidationError (HTTP 400).
    extra = {"unique_key": "k", "unique_mode": "throttle"} if field == "unique_window_s" else {}
    with pytest.raises(ValidationError, match=f"^{field} must be between ") as raised:
        live_engine.tasks.enqueue("dtq.echo", **{field: HUGE}, **extra)
    assert raised.value.field == field


@pytest.mark.parametrize("field", TIMING)
def test_http_submit_with_a_huge_integer_timing_field_answers_400_not_500(live_engine: Engine, field: str) -> None:
    api = APIClient()
    api.raise_request_exception = False  # what a real client sees
    extra = ', "unique_key": "k", "unique_mode": "throttle"' if field == "unique_window_s" else ""
    raw = f'{{"type": "dtq.echo", "{field}": 1{"0" * 400}{extra}}}'
    response = api.post("/api/v1/tasks", raw, content_type="application/json")
    assert assert_error(response, 400, "VALIDATION_ERROR")["field"] == field
    assert "default" not in live_engine.registry.layouts(fresh=True)  # nothing was queued, not even made


def test_retryable_error_with_a_huge_retry_after_still_retries(
        live_engine: Engine, redis_client, start_worker: Callable[..., WorkerProcess]) -> None:
    # registry.RetryableError: "A value that is not a number of seconds from 0 to 366 days is
    # ignored: the usual backoff applies. Raising must not fail." Also for a huge integer
    # Retry-After (int(response.headers["Retry-After"]) from a misbehaving server), which float()
    # cannot convert: the task is retried, not dead-lettered with an OverflowError.
    engine, keys = live_engine, live_engine.keys
    tid = engine.tasks.enqueue("failure.flaky", {"retry_after": {"1": HUGE}}, queue="huge", max_attempts=3).id
    w = start_worker("--queues", "huge", **env())
    wait_for(lambda: status(redis_client, keys, tid) in ("SUCCEEDED", "FAILED", "DEAD_LETTERED"),
             timeout=30, message=w.output)
    record = task(redis_client, keys, tid)
    assert record["status"] == "SUCCEEDED", (record.get("status"), record.get("error_class"),
                                              record.get("last_error"))
    assert execs(redis_client, keys, tid) == 2


@pytest.mark.parametrize("field", ["every_seconds", "timeout_seconds", "max_attempts"])
def test_http_periodic_schedule_with_a_huge_integer_answers_400_not_500(live_engine: Engine, anonymous_admin,
                                                                        field: str) -> None:
    api = APIClient()
    api.raise_request_exception = False
    base = '"name": "tick", "type": "dtq.echo"' + ('' if field == "every_seconds" else ', "every_seconds": 30')
    raw = f'{{{base}, "{field}": 1{"0" * 400}}}'
    response = api.post("/api/v1/periodic", raw, content_type="application/json")
    assert assert_error(response, 400, "VALIDATION_ERROR")["field"] == field
    assert api.get("/api/v1/periodic/tick").status_code == 404  # nothing was stored
