"""Every Lua script loads, and a call with another number of keys than its file name declares
(`verbNoun-N.lua`) is refused before anything reaches Redis."""

from __future__ import annotations

import re

import pytest
import redis

from dtq_core.errors import DtqError, ErrorCode, raise_for_code
from dtq_core.scripts import _ROOT, NUMKEYS, SOURCES, ScriptKeyCountError, Scripts


def _evalsha_calls(client: redis.Redis) -> int:
    """Script calls run so far: EVALSHA, and FCALL for the hot-path scripts (scripts/library.py)."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("evalsha", "fcall"))


def test_every_script_loads_and_declares_its_key_count(redis_client: redis.Redis) -> None:
    assert set(NUMKEYS) == set(SOURCES) and SOURCES
    for source in SOURCES.values():
        redis_client.script_load(source)  # a syntax error (or a broken include) raises here


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_wrong_key_count_raises_and_runs_nothing(redis_client: redis.Redis, key_prefix: str, name: str) -> None:
    scripts = Scripts(redis_client)
    before = _evalsha_calls(redis_client)
    for count in [n for n in (NUMKEYS[name] - 1, NUMKEYS[name] + 1) if n >= 0]:
        keys = [f"{key_prefix}:k{i}" for i in range(count)]
        with pytest.raises(ScriptKeyCountError, match=f"{name}-{NUMKEYS[name]} takes {NUMKEYS[name]} keys"):
            scripts(name, keys=keys, args=[])
        with pytest.raises(ScriptKeyCountError):
            scripts.call_direct(name, keys=keys, args=[])
        with pytest.raises(ScriptKeyCountError):
            scripts.command(name, keys=keys, args=[])
    assert _evalsha_calls(redis_client) == before
    assert redis_client.keys(f"{key_prefix}:*") == []


def test_the_lua_return_codes_are_the_python_ones() -> None:
    table = re.search(r"^local CODE = \{(.*?)\}", (_ROOT / "includes" / "common.lua").read_text(), re.S | re.M)
    assert table, "includes/common.lua names the return codes in `local CODE = {...}`"
    lua = {name: int(value) for name, value in re.findall(r"(\w+) = (-?\d+)", table.group(1))}
    assert lua == {code.name: code.value for code in ErrorCode}


@pytest.mark.parametrize("code", [c for c in ErrorCode if c < 0])
def test_every_refusal_code_raises_a_dtq_error(code: ErrorCode) -> None:
    details = {"queue": "q", "status": "SUCCEEDED", "count": 3, "max_depth": 3, "max_queues": 3,
               "waiting": 1, "in_flight": 0, "scheduled": 0}
    with pytest.raises(DtqError) as caught:
        raise_for_code(int(code), task_id="t1", script="someScript", **details)
    assert caught.value.code == code.name


def test_a_success_code_is_returned_named() -> None:
    assert raise_for_code(1, task_id="t1", script="enqueueTask") is ErrorCode.EXISTING
