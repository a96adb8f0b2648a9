"""Text search (`q=`) in GET /api/v1/tasks and GET /api/v1/dlq finds what an operator sees in a
payload or an error: in any case, in any script, with quotes, backslashes and slashes (escaped in
the JSON text the scan scripts read) and with Lua pattern characters taken literally."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from rest_framework.test import APIClient

from dtq_core.engine import Engine
from dtq_core.engine.recent import Needle

from ..dashboard.conftest import run_burst


def _found_tasks(queue: str, q: str) -> list[str]:
    response = APIClient().get("/api/v1/tasks", {"queue": queue, "q": q})
    assert response.status_code == 200, response.content
    return [t["id"] for t in response.json()["results"]]


def _found_dead_letters(queue: str, q: str) -> list[str]:
    response = APIClient().get("/api/v1/dlq", {"queue": queue, "q": q})
    assert response.status_code == 200, response.content
    return [d["task_id"] for d in response.json()["results"]]


@pytest.mark.parametrize(("text", "json_forms"), [
    ("invoice 77", ()),
    ("c:\\exports", ("c:\\\\exports",)),
    ('say "hi"', ('say \\"hi\\"',)),
    ("a/b", ("a\\/b",)),  # cjson (the error list) escapes "/", Python's json does not
    ("line\none", ("line\\none",)),
    ("del\x7f", ("del\\u007f",)),
    ("müller", ()),  # dtq writes JSON with ensure_ascii=False: non-ASCII stays itself
])
def test_a_needle_knows_how_json_text_holds_it(text: str, json_forms: tuple[str, ...]) -> None:
    assert Needle.of(text).json_forms == json_forms


@pytest.mark.parametrize("q", ["MÜLLER", "müller", "café", "Müller Café"])
def test_text_search_ignores_case_for_non_ascii_letters(live_engine: Engine, q: str) -> None:
    # Lua lower-cases A-Z only: a needle with other letters is matched in Python.
    task_id = live_engine.tasks.enqueue("dtq.noop", {"customer": "MÜLLER CAFÉ"}, queue="search-ci").id
    live_engine.tasks.enqueue("dtq.noop", {"customer": "MILLER CAFE"}, queue="search-ci")
    assert _found_tasks("search-ci", q) == [task_id]


def test_a_non_ascii_search_finds_errors_too(live_engine: Engine) -> None:
    dead = live_engine.tasks.enqueue("dtq.fail", {"retryable": False, "message": "ÉCHEC total"}, queue="ci-err",
                                     max_attempts=1).id
    live_engine.tasks.enqueue("dtq.fail", {"retryable": False, "message": "echec"}, queue="ci-err", max_attempts=1)
    run_burst(live_engine, queues=["ci-err"])
    assert _found_tasks("ci-err", "échec") == [dead]  # the last error and the error list
    assert _found_dead_letters("ci-err", "échec") == [dead]


@pytest.mark.single_node
def test_a_non_ascii_search_reads_a_partition_in_one_call(engine: Engine,
                                                          count_writes: Callable[[], list[Any]]) -> None:
    # Matched in Python, the needle must not make the script stop after a page's worth of candidates.
    for i in range(30):
        engine.tasks.enqueue("dtq.noop", {"i": i}, queue="ci-calls")
    engine.tasks.list(queue="ci-calls", text="x", limit=1)  # warm up: the script is loaded once
    sends = count_writes()
    assert engine.tasks.list(queue="ci-calls", text="unmatched", limit=1).items == []
    in_redis = len(sends)
    page = engine.tasks.list(queue="ci-calls", text="ünmatched", limit=1)
    assert page.items == [] and page.next_cursor is None
    assert len(sends) - in_redis == in_redis  # one script call, as for an ASCII needle


@pytest.mark.parametrize("q", ["C:\\exports\\may.csv", 'say "hi"', '"HI"'])
def test_text_search_finds_payload_text_with_quotes_or_backslashes(live_engine: Engine, q: str) -> None:
    # The script reads the payload's JSON, where " and \ are escaped: the needle is looked for
    # escaped the same way too.
    task_id = live_engine.tasks.enqueue("dtq.noop", {"file": "C:\\exports\\may.csv", "note": 'say "hi"'},
                                        queue="search-esc").id
    other = live_engine.tasks.enqueue("dtq.noop", {"file": "C:/exports/june.csv", "note": "say hi"},
                                      queue="search-esc").id
    assert _found_tasks("search-esc", q) == [task_id]
    assert set(_found_tasks("search-esc", "exports")) == {task_id, other}


def test_text_search_still_finds_the_json_text_itself(live_engine: Engine) -> None:
    # What the search matched before (a piece of the JSON text, pasted from a payload) still matches.
    task_id = live_engine.tasks.enqueue("dtq.noop", {"file": "C:\\exports"}, queue="search-raw").id
    assert _found_tasks("search-raw", '"file":"C:\\\\exports"') == [task_id]


def test_text_search_finds_a_path_in_the_error_list(live_engine: Engine) -> None:
    # The error list is written by Redis's cjson, which writes "/" as "\/"; the traceback holds the
    # handler's file, which the last error ("RuntimeError: boom") does not.
    dead = live_engine.tasks.enqueue("dtq.fail", {"retryable": False, "message": "boom"}, queue="err-path",
                                     max_attempts=1).id
    run_burst(live_engine, queues=["err-path"])
    assert _found_tasks("err-path", "dtq_tasks/builtins.py") == [dead]


@pytest.mark.parametrize("q", ["C:\\exports\\may.csv", 'say "hi"'])
def test_dlq_text_search_finds_payload_text_with_a_backslash(live_engine: Engine, q: str) -> None:
    payload = {"retryable": False, "message": "boom", "file": "C:\\exports\\may.csv", "note": 'say "hi"'}
    dead = live_engine.tasks.enqueue("dtq.fail", payload, queue="dlq-esc").id
    live_engine.tasks.enqueue("dtq.fail", {"retryable": False, "message": "boom", "file": "C:/exports"},
                              queue="dlq-esc")
    run_burst(live_engine, queues=["dlq-esc"])
    assert len(_found_dead_letters("dlq-esc", "exports")) == 2
    assert _found_dead_letters("dlq-esc", q) == [dead]


@pytest.mark.parametrize("q", ["50% off", "[promo]", "(v1.2)", "a.b", "%d"])
def test_lua_pattern_characters_in_a_needle_are_literal(live_engine: Engine, q: str) -> None:
    wanted = {"retryable": False, "message": "boom", "note": "50% off [promo] (v1.2) a.b %d"}
    # Read as Lua patterns, the needles would match these instead.
    decoys = {"retryable": False, "message": "boom", "note": "50 off p v172 axb 7"}
    task_id = live_engine.tasks.enqueue("dtq.fail", wanted, queue="pattern").id
    live_engine.tasks.enqueue("dtq.fail", decoys, queue="pattern")
    assert _found_tasks("pattern", q) == [task_id]
    run_burst(live_engine, queues=["pattern"])
    assert _found_dead_letters("pattern", q) == [task_id]
