"""manage.py functions list|prune: dtq's Redis function libraries on the server (every master of a
cluster), and deleting those of other dtq versions, never anyone else's, audited."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
import redis
import redis.cluster
from django.core.management import call_command
from django.core.management.base import CommandError

from dtq_core.engine import Engine
from dtq_core.scripts import LIBRARIES

OLD = "dtq_enqueueTask_0123456789abcdef"  # what an older dtq version's submit library is named
NOT_OURS = ("myapp_tools", "dtq_notes")  # someone else's, whatever the name starts with


def run(*args: str) -> tuple[str, str]:
    out, err = StringIO(), StringIO()
    call_command(*args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def _masters(client: Any) -> int:
    return len(client.get_primaries()) if isinstance(client, redis.cluster.RedisCluster) else 1


def _load(client: Any, name: str) -> None:
    client.function_load(f"#!lua name={name}\nredis.register_function('{name}_f', function() return 1 end)",
                         replace=True)


def _loaded(client: Any) -> set[str]:
    """Library names on every master (a cluster's replies per node, merged)."""
    if isinstance(client, redis.cluster.RedisCluster):
        replies = client.execute_command("FUNCTION", "LIST", target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        return {lib["library_name"] for reply in replies.values() for lib in reply}
    return {lib["library_name"] for lib in client.execute_command("FUNCTION", "LIST")}


@pytest.fixture
def old_and_foreign(live_engine: Engine) -> Any:
    client = live_engine.client
    for name in (OLD, *NOT_OURS):
        _load(client, name)
    yield client
    for name in (OLD, *NOT_OURS):
        try:
            client.function_delete(name)
        except redis.exceptions.ResponseError:
            pass  # pruned by the test


def test_prune_deletes_other_versions_libraries_only_and_is_audited(live_engine: Engine, old_and_foreign: Any) -> None:
    client = old_and_foreign
    live_engine.scripts.load_all()  # what this version's processes load at their first call
    listed = json.loads(run("functions", "list", "--json")[0])
    current = {lib.function for lib in LIBRARIES.values()}
    assert {item["name"]: item["current"] for item in listed} == {**dict.fromkeys(current, True), OLD: False}
    assert {item["masters"] for item in listed} == {_masters(client)}
    table = run("functions", "list")[0].splitlines()
    assert table[0].split() == ["LIBRARY", "VERSION", "MASTERS"] and table[-1].split()[:2] == [OLD, "other"]

    assert run("functions", "prune", "--dry-run")[0].splitlines() == [
        f"would delete {OLD}", "1 library of other dtq versions (nothing deleted: --dry-run)"]
    assert OLD in _loaded(client)
    assert run("functions", "prune")[0].strip() == f"deleted {OLD}"
    assert _loaded(client) >= current | set(NOT_OURS) and OLD not in _loaded(client)
    entry = live_engine.audit.list(limit=1).items[0]
    assert (entry["action"], entry["target"], entry["count"], entry["outcome"]) == (
        "functions.prune", "functions", 1, "finished")
    assert run("functions", "prune")[0].strip() == "no libraries of other dtq versions"
    # This version's calls are untouched: a submit is still one FCALL that finds its library.
    assert live_engine.tasks.enqueue("dtq.echo", {"after": "prune"}).status == "QUEUED"


def test_a_version_whose_library_was_pruned_loads_it_again_at_its_next_call(live_engine: Engine) -> None:
    # What another version's prune does to this one's processes while they still run.
    live_engine.tasks.enqueue("dtq.echo", {"n": 1})
    for library in LIBRARIES.values():
        live_engine.client.function_delete(library.function)
    assert live_engine.tasks.enqueue("dtq.echo", {"n": 2}).status == "QUEUED"
    assert LIBRARIES["enqueueTask"].function in _loaded(live_engine.client)


def test_list_says_when_this_versions_libraries_are_not_loaded_yet(live_engine: Engine) -> None:
    for library in LIBRARIES.values():
        try:
            live_engine.client.function_delete(library.function)
        except redis.exceptions.ResponseError:
            pass  # not loaded on this server yet
    out, err = run("functions", "list")
    assert all(lib.function not in out for lib in LIBRARIES.values())
    assert "this version's libraries are not loaded yet" in err


@pytest.mark.parametrize("args", [("functions",), ("functions", "purge"), ("functions", "prune", "--force"),
                                  ("functions", "list", "extra")])
def test_bad_arguments_are_one_line_errors(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^Error: "):
        run(*args)


@pytest.mark.parametrize("args", [("functions", "list"), ("functions", "prune"), ("functions", "prune", "--dry-run")])
def test_a_redis_that_is_down_is_named_and_nothing_is_deleted(args: tuple[str, ...]) -> None:
    with pytest.raises(CommandError, match="^cannot reach Redis at redis://127.0.0.1:1/0"):
        run(*args)
