"""The Redis Cluster rules of the key layout (docs/keyspace.md): the keys Lua builds from a
partition's prefix are the ones dtq_core.keys names, every key of a partition is in its slot,
and no script call can send keys of two slots."""

from __future__ import annotations

import json
import re

import pytest
import redis
from redis.crc import key_slot

from dtq_core.keys import PRIORITIES, Keys, dlq_ref, parse_dlq_ref, tag_of
from dtq_core.scripts import _ROOT, NUMKEYS, CrossSlotKeys, check_keys

# partition_keys(p).<name> -> the Keys method (and its sample arguments) it must equal.
LUA_TO_PYTHON = {
    "owner": ("owner", ()), "schedule": ("schedule", ()), "schedule_claims": ("schedule_claims", ()),
    "lock": ("lock", ()), "dlq": ("dlq", ()), "running": ("running", ()), "recent": ("recent", ()),
    "ready": ("ready", ()), "paused": ("paused", ()), "stats_tasks": ("stats_tasks", ()),
    "stats_duration": ("stats_duration", ()), "stats_counters": ("stats_counters", ()),
    "event_seq": ("event_seq", ()),
}
TAG = "ab12cd"
TASK_ID = f"{TAG}-{'0' * 32}"

_PARTITION_KEYS_PROBE = """
-- #include common
local K = partition_keys(KEYS[1])
return cjson.encode(K)
"""


def _lua_partition_keys(client: redis.Redis, prefix: str) -> dict[str, str]:
    source = (_ROOT / "includes" / "common.lua").read_text() + _PARTITION_KEYS_PROBE.split("-- #include common", 1)[1]
    return json.loads(client.eval(source, 1, Keys(prefix).partition(TAG)))


def test_lua_builds_a_partitions_keys_as_keys_py_names_them(redis_client: redis.Redis, key_prefix: str) -> None:
    keys = Keys(key_prefix)
    lua = _lua_partition_keys(redis_client, key_prefix)
    for lua_name, (method, args) in LUA_TO_PYTHON.items():
        assert lua[lua_name] == getattr(keys, method)(TAG, *args), lua_name
    assert lua["task_prefix"] + TASK_ID == keys.task(TASK_ID)
    assert lua["result_prefix"] + TASK_ID == keys.result(TASK_ID)
    assert lua["idem_prefix"] + "k" == keys.idem(TAG, "k")
    assert lua["stream_prefix"] + "q:high" == keys.stream(TAG, "q", "high")
    assert lua["throughput_prefix"] + "7" == keys.throughput(TAG, 7)
    assert lua["schedule"] + ":counts" == keys.schedule_counts(TAG)
    assert lua["dlq"] + ":counts" == keys.dlq_counts(TAG)
    assert (lua["events_channel"], lua["wake_channel"], lua["tag"]) == (keys.events(), keys.wake(), TAG)


def test_every_key_of_a_partition_is_in_its_slot() -> None:
    keys = Keys("dtq")
    slot = key_slot(keys.partition(TAG).encode())
    names = [getattr(keys, method)(TAG, *args) for method, args in LUA_TO_PYTHON.values()]
    names += [keys.task(TASK_ID), keys.result(TASK_ID), keys.idem(TAG, "k"), keys.throughput(TAG, 1),
              keys.schedule_counts(TAG), keys.dlq_counts(TAG), *keys.streams(TAG, "q")]
    assert {key_slot(n.encode()) for n in names} == {slot}
    assert key_slot(keys.audit().encode()) == key_slot(keys.audit_open().encode())
    assert len(PRIORITIES) == len(keys.streams(TAG, "q"))


def test_ids_carry_their_partition() -> None:
    assert tag_of(TASK_ID) == TAG
    assert parse_dlq_ref(dlq_ref(TAG, "1700000000000-3")) == (TAG, "1700000000000-3")
    assert parse_dlq_ref("1700000000000-3") is None
    with pytest.raises(ValueError):
        tag_of("not-an-id")


def test_lua_reads_keys_only_from_declared_keys() -> None:
    """No script builds a key from ARGV: every redis.call's key argument is KEYS[...] or a name
    derived from one (partition_keys), never ARGV[...] directly."""
    offenders = []
    for path in sorted(_ROOT.glob("*.lua")) + sorted((_ROOT / "includes").glob("*.lua")):
        for line in path.read_text().splitlines():
            if re.search(r"(rcall|redis\.p?call)\('\w+', ARGV\[", line):
                offenders.append(f"{path.name}: {line.strip()}")
    assert offenders == []


def test_a_call_with_keys_of_two_slots_is_refused_before_redis() -> None:
    two_key_scripts = sorted(name for name, n in NUMKEYS.items() if n >= 2)
    assert two_key_scripts, "some script takes two keys (the audit pair)"
    name = two_key_scripts[0]
    keys = Keys("dtq")
    with pytest.raises(CrossSlotKeys):
        check_keys(name, [keys.partition("aaaaaa"), keys.partition("bbbbbb")][: NUMKEYS[name]]
                   + [keys.partition(f"t{i}") for i in range(NUMKEYS[name] - 2)])
