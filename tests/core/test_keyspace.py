"""The Redis Cluster rules of the key layout (docs/keyspace.md): the keys Lua builds from a
partition's prefix are the ones dtq_core.keys names, every key of a partition is in its slot,
and no script call can send keys of two slots."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest
import redis
from redis.crc import key_slot

from dtq_core.keys import PRIORITIES, Keys, dlq_ref, parse_dlq_ref, tag_of
from dtq_core.scripts import _ROOT, NUMKEYS, CrossSlotKeys, _expand, check_keys, slot_guarded
from dtq_core.scripts.library import build

# partition_keys(p).<name> -> the Keys method (and its sample arguments) it must equal.
LUA_TO_PYTHON = {
    "owner": ("owner", ()), "schedule": ("schedule", ()), "schedule_claims": ("schedule_claims", ()),
    "lock": ("lock", ()), "dlq": ("dlq", ()), "running": ("running", ()), "recent": ("recent", ()),
    "ready": ("ready", ()), "paused": ("paused", ()), "stats_tasks": ("stats_tasks", ()),
    "stats_duration": ("stats_duration", ()), "stats_counters": ("stats_counters", ()),
    "event_seq": ("event_seq", ()), "periodic_index": ("periodic_index", ()),
    "retain_ok": ("retain_ok", ()), "retain_failed": ("retain_failed", ()),
    "limits": ("limits", ()), "limits_rate": ("limits_rate", ()), "limits_held": ("limits_held", ()),
    "limits_groups": ("limits_groups", ()), "limits_waiting": ("limits_waiting", ()),
    "limits_gpause": ("limits_group_pause", ()),
    "wf_outbox": ("wf_outbox", ()), "wf_outbox_due": ("wf_outbox_due", ()),
    "hist": ("history", ()), "hist_types": ("history_types", ()),
}
ROOT = Path(__file__).resolve().parents[2]
TAG = "ab12cd"
TASK_ID = f"{TAG}-{'0' * 32}"

_PARTITION_KEYS_PROBE = """
-- #include common
local K = partition_keys(KEYS[1])
local names = {tag = K.tag}
for name in pairs(PARTITION_SUFFIX) do names[name] = K[name] end
for name in pairs(PARTITION_CHANNEL) do names[name] = K[name] end
return cjson.encode(names)
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
    assert lua["unique_prefix"] + "k" == keys.unique(TAG, "k")
    assert lua["stream_prefix"] + "q:high" == keys.stream(TAG, "q", "high")
    assert lua["limits_wait_prefix"] + "acme" == keys.limits_wait(TAG, "acme")
    assert lua["limits_grate_prefix"] + "acme" == keys.limits_group_rate(TAG, "acme")
    assert lua["throughput_prefix"] + "7" == keys.throughput(TAG, 7)
    assert lua["samples_prefix"] + "w1:ab" == keys.samples_applied(TAG, "w1:ab")
    assert lua["schedule"] + ":counts" == keys.schedule_counts(TAG)
    assert lua["dlq"] + ":counts" == keys.dlq_counts(TAG)
    assert lua["periodic_prefix"] + "report.nightly" == keys.periodic(TAG, "report.nightly")
    assert lua["periodic_tick_prefix"] + "report.nightly:1700000000000" == \
        keys.periodic_tick(TAG, "report.nightly", 1700000000000)
    wid = f"{TAG}-w{'0' * 31}"
    assert lua["wf_prefix"] + wid == keys.workflow(wid)
    assert (lua["events_channel"], lua["wake_channel"], lua["tag"]) == (keys.events(), keys.wake(), TAG)


_NAMES_ACROSS_CALLS_PROBE = """
-- #include common
local K = partition_keys(KEYS[1])
local mark_seen = rawget(K, 'limits_rung') ~= nil or K.limits_rung ~= nil
K.limits_rung = true  -- a per-call mark (includes/limits.lua): must not reach the next call
return cjson.encode({tag = K.tag, ready = K.ready, running = K.running, task_prefix = K.task_prefix,
                     wake_channel = K.wake_channel, mark_seen = mark_seen})
"""


def test_a_function_library_names_each_partition_right_call_after_call(redis_client: redis.Redis,
                                                                       key_prefix: str) -> None:
    """As a function library the names outlive the call (a cache per prefix, started over past
    its bound): 600 partitions, twice round, each call gets its own partition's names and none
    of the previous call's marks."""
    keys = Keys(key_prefix)
    library = build("namesProbe", _NAMES_ACROSS_CALLS_PROBE, _expand)
    redis_client.function_load(library.source, replace=True)
    try:
        tags = [f"t{i:04x}" for i in range(600)]
        for _ in range(2):
            for tag in tags:
                names = json.loads(redis_client.fcall(library.function, 1, keys.partition(tag)))
                assert names == {"tag": tag, "ready": keys.ready(tag), "running": keys.running(tag),
                                 "task_prefix": keys.task(f"{tag}-{'0' * 32}")[:-len(f"{tag}-{'0' * 32}")],
                                 "wake_channel": keys.wake(), "mark_seen": False}
    finally:
        redis_client.function_delete(library.function)


def test_every_key_of_a_partition_is_in_its_slot() -> None:
    keys = Keys("dtq")
    slot = key_slot(keys.partition(TAG).encode())
    names = [getattr(keys, method)(TAG, *args) for method, args in LUA_TO_PYTHON.values()]
    names += [keys.task(TASK_ID), keys.result(TASK_ID), keys.idem(TAG, "k"), keys.unique(TAG, "k"),
              keys.throughput(TAG, 1),
              keys.schedule_counts(TAG), keys.dlq_counts(TAG), *keys.streams(TAG, "q"),
              keys.periodic(TAG, "a:b"), keys.periodic_tick(TAG, "a:b", 1),
              keys.workflow(f"{TAG}-w{'0' * 31}"), keys.workflow_part(f"{TAG}-w{'0' * 31}", "state")]
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


# -- the static check: every script call site in the product sends keys of one slot --------------
PRODUCT = ("dtq_core", "dtq_tasks", "dtq_api", "dtq_dashboard", "dtq_worker")
SCRIPT_CALLS = {"scripts", "call_direct", "command", "routed", "call_direct_many", "_call", "__call__"}
# Call sites that pass keys on from their own caller (checked where those callers build them).
# The keys a script call declares on a cluster (scripts.slot_guarded: the caller's, and a key in
# the first one's slot; test_the_slot_guard_stays_in_the_slot_of_the_first_key).
FORWARDERS = {("dtq_core/scripts/__init__.py", "keys"), ("dtq_core/worker/hotpath.py", "keys"),
              ("dtq_core/scripts/__init__.py", "declared")}


def _script_call_sites() -> list[tuple[str, int, ast.expr]]:
    sites = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text())
            for node in ast.walk(tree):
                if not isinstance(node, ast.Call):
                    continue
                for kw in node.keywords:
                    if kw.arg == "keys":
                        sites.append((str(path.relative_to(ROOT)), node.lineno, kw.value))
    return sites


def _slot_of_builder(expr: ast.expr) -> int | None:
    """The slot of a key written as keys.<method>() with no argument (a global key); None for a
    key built from an argument (a partition's: checked by the Keys tests above)."""
    if isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and not expr.args:
        method = getattr(Keys("dtq"), expr.func.attr, None)
        if callable(method):
            return int(key_slot(method().encode()))
    return None


def test_every_script_call_site_sends_keys_of_one_slot() -> None:
    """Statically, over the product's source: a script call passes one key (a partition's prefix,
    or one global key), or a literal list whose keys are global keys of one slot (the {audit}
    pair). Anything else must be a known forwarder of its caller's keys."""
    sites = _script_call_sites()
    assert len(sites) > 20
    problems = []
    for path, line, value in sites:
        if isinstance(value, ast.List):
            if len(value.elts) <= 1:
                continue
            slots = {_slot_of_builder(e) for e in value.elts}
            if None in slots or len(slots) != 1:
                problems.append(f"{path}:{line}: {ast.unparse(value)}")
        elif isinstance(value, ast.Name) and (path, value.id) in FORWARDERS:
            continue
        elif isinstance(value, ast.Attribute) and value.attr == "keys":
            continue  # a Keys instance handed to a constructor (Plumbing(keys=...)), not a script's KEYS
        else:
            problems.append(f"{path}:{line}: keys={ast.unparse(value)}")
    assert problems == []


def test_the_static_check_tells_one_slot_from_two() -> None:
    one = ast.parse("f(keys=[self.keys.audit(), self.keys.audit_open()])", mode="eval").body
    two = ast.parse("f(keys=[self.keys.queues(), self.keys.task_types()])", mode="eval").body
    built = ast.parse("f(keys=[k.partition(a), k.partition(b)])", mode="eval").body
    slots = [{_slot_of_builder(e) for e in call.keywords[0].value.elts}  # type: ignore[attr-defined]
             for call in (one, two, built)]
    assert len(slots[0]) == 1 and None not in slots[0]
    assert len(slots[1]) == 2
    assert None in slots[2]


def test_the_slot_guard_stays_in_the_slot_of_the_first_key() -> None:
    keys = Keys("dtq")
    for first in (keys.partition("ab12cd"), keys.audit(), keys.global_history("all")):
        guarded = slot_guarded([first])
        assert guarded[0] == first and len(guarded) == 2
        assert key_slot(guarded[1].encode()) == key_slot(first.encode())
    pair = [keys.audit(), keys.audit_open()]
    assert slot_guarded(pair)[:2] == pair and len(slot_guarded(pair)) == 3
    assert slot_guarded([keys.queues()]) == [keys.queues()]  # one real key without a tag: Redis's ASK holds
    for untagged in ("dtq:once:{half", "dtq:once:{}x", "dtq:once:}{"):  # hashed whole: a suffix would move it
        assert slot_guarded([untagged]) == [untagged]
