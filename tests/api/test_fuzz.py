"""Fuzz every operation of /api/schema/ with schemathesis (in-process WSGI, real Redis): no 500s.

One test id per operation: schemathesis' own `schema.parametrize()` gives all of them the same
id, and under `pytest -n auto --dist loadfile` (make test) xdist keeps only one of them.

Bounded on purpose (FUZZ_EXAMPLES valid or schema-violating examples per operation) so it stays
well under a minute; destructive operations run too, which is why every test gets its own key prefix.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from dtq_core.engine import Engine

FUZZ_EXAMPLES = 15


def _load() -> Any:
    from dtq_site.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


schema = _load()  # pytest-django has set Django up before test modules are imported
OPERATIONS = [result.ok().label for result in schema.get_all_operations()]


def test_the_schema_lists_every_operation_the_docs_describe() -> None:
    # A schema that failed to list its operations would leave nothing fuzzed and nothing failing.
    assert len(OPERATIONS) >= 19 and "POST /api/v1/tasks" in OPERATIONS


@pytest.fixture(autouse=True)
def known_task(live_engine: Engine, db: Any) -> None:  # db: the fuzzer sends session cookies
    live_engine.tasks.enqueue("dtq.echo")  # a known queue and task, so some cases reach the happy path


@pytest.mark.parametrize("label", OPERATIONS)
@settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@given(data=st.data())
def test_no_operation_answers_500(label: str, data: st.DataObject) -> None:
    operation = schema.find_operation_by_label(label)
    # Both valid and schema-violating inputs: bad input must be a 4xx envelope, never a 500.
    case = data.draw(st.one_of(operation.as_strategy(GenerationMode.POSITIVE),
                               operation.as_strategy(GenerationMode.NEGATIVE)))
    response = case.call()
    case.validate_response(response, checks=[not_a_server_error])
    if response.status_code >= 400:
        assert "error" in response.json(), response.text  # the envelope, every time
