"""Fuzz every operation of /api/schema/ with schemathesis (in-process WSGI, real Redis): no 500s.

Bounded on purpose (a few examples per operation) so it stays well under a minute; destructive
operations run too, which is why every test gets its own key prefix.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from dtq_core.engine import Engine


def _load() -> Any:
    from dtq_site.wsgi import application

    loaded = schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)
    # Both valid and schema-violating inputs: bad input must be a 4xx envelope, never a 500.
    loaded.config.generation.update(modes=[GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
    return loaded


schema = _load()  # pytest-django has set Django up before test modules are imported


@pytest.fixture(autouse=True)
def known_task(live_engine: Engine, db: Any) -> None:  # db: the fuzzer sends session cookies
    live_engine.enqueue("dtq.echo")  # a known queue and task, so some cases reach the happy path


@schema.parametrize()
@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
def test_no_operation_answers_500(case: Any) -> None:
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400:
        assert "error" in response.json(), response.text  # the envelope, every time
