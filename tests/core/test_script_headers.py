"""Static checks of every Lua script (no Redis needed).

1. The Input/Output header: every `verbNoun-N.lua` names exactly KEYS[1..N] (one by one, or as a
   range KEYS[a..b]), the body reads no KEYS beyond N, and every literal ARGV[i] the body reads
   is named in the header (one by one, as a range ARGV[a..b], or as a tail ARGV[a..]).
2. Keys come from declared KEYS, never from ARGV (Redis Cluster routes on KEYS). The heuristic,
   applied to each script and each include on its own, comments stripped:
   - a value read from ARGV (`ARGV[i]`, or a name assigned from it: `local p = ARGV[5]`,
     `{prefix = ARGV[5]}`) is the left operand of `..`: a key built on an ARGV prefix;
   - the key argument of redis.call / redis.pcall / rcall (the first one after the command
     name) is an `ARGV[i]` itself, or a name assigned from one: a whole key passed in ARGV.
   It does not follow values through function arguments: a batch script handing `ARGV[i]` to a
   helper is not seen (the batch scripts whose rows name a stream are listed in
   docs/contributing.md).
"""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from dtq_core.scripts import NUMKEYS

ROOT = files("dtq_core.scripts")
SCRIPTS = sorted(p.name for p in ROOT.iterdir() if p.name.endswith(".lua"))
INCLUDES = sorted(p.name for p in (ROOT / "includes").iterdir() if p.name.endswith(".lua"))

_HEADER = re.compile(r"\A--\[\[(.*?)\]\]", re.S)
_KEYS_RANGE = re.compile(r"KEYS\[(\d+)(?:\.\.(\d+))?\]")
_ARGV_NAMED = re.compile(r"ARGV\[(\d+)(\.\.(\d*))?\]")


def _header(source: str) -> str:
    match = _HEADER.match(source)
    assert match, "the script opens with a --[[ ... ]] header"
    return match.group(1)


def _code(source: str) -> str:
    """The source without its header and comments (strings stay: a '--' in one is rare here)."""
    body = _HEADER.sub("", source)
    body = re.sub(r"--\[\[.*?\]\]", "", body, flags=re.S)
    return re.sub(r"--[^\n]*", "", body)


def _declared_keys(header: str) -> list[int]:
    named: list[int] = []
    for first, last in _KEYS_RANGE.findall(header):
        named.extend(range(int(first), int(last or first) + 1))
    return named


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_header_declares_exactly_the_keys_of_the_file_name(name: str) -> None:
    source = (ROOT / name).read_text()
    header = _header(source)
    assert "Input:" in header and "Output:" in header, name
    n = NUMKEYS[name.removesuffix(".lua").rpartition("-")[0]]
    declared = _declared_keys(header)
    assert sorted(declared) == list(range(1, n + 1)), f"{name}: the header names KEYS {declared}, want 1..{n}"
    used = {int(i) for i in re.findall(r"KEYS\[(\d+)\]", _code(source))}
    assert used <= set(range(1, n + 1)), f"{name} reads KEYS {sorted(used - set(range(1, n + 1)))} past {n}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_header_names_every_argv_the_script_reads(name: str) -> None:
    source = (ROOT / name).read_text()
    singles, spans = set(), []
    for first, span, last in _ARGV_NAMED.findall(_header(source)):
        if not span:
            singles.add(int(first))
        else:
            spans.append((int(first), int(last) if last else 10**6))
    for i in {int(i) for i in re.findall(r"ARGV\[(\d+)\]", _code(source))}:
        assert i in singles or any(a <= i <= b for a, b in spans), f"{name} reads ARGV[{i}], its header does not say"


def _argv_key_findings(code: str) -> list[str]:
    names, lists = set(), []
    for m in re.finditer(r"local\s+([\w\s,]+?)\s*=\s*([^\n]+)", code):  # local a, b = ARGV[1], ARGV[2]
        lists.append(m.span(1))
        for target, value in zip((t.strip() for t in m.group(1).split(",")), m.group(2).split(","), strict=False):
            if value.strip().startswith("ARGV["):
                names.add(target)
    for m in re.finditer(r"(\w+)\s*=\s*ARGV\[", code):  # `x = ARGV[i]`, and `{x = ARGV[i]}`
        if not any(start <= m.start(1) < end for start, end in lists):
            names.add(m.group(1))
    findings = [m.group(0) for m in re.finditer(r"ARGV\[[^\]]*\]\s*\.\.", code)]
    for name in names:
        findings += [m.group(0) for m in re.finditer(rf"(?<![\w'\"]){name}\s*\.\.(?!\.)", code)]
    # The key argument: the first after the command name (and after XGROUP's or XINFO's subcommand;
    # commands whose keys come later, XREADGROUP ... STREAMS, are not looked at).
    call = (r"(?:rcall|redis\.p?call|pcall\(\s*rcall)\s*[(,]\s*'(?:(?:XGROUP|XINFO)'\s*,\s*'[A-Z]+|[A-Za-z]+)'"
            r"\s*,\s*([\w.]+(?:\[[^\]]*\])?)")
    for m in re.finditer(call, code):
        key = m.group(1)
        if key.startswith("ARGV[") or key.rpartition(".")[2] in names:
            findings.append(m.group(0))
    return findings


@pytest.mark.parametrize("name", SCRIPTS + [f"includes/{i}" for i in INCLUDES])
def test_no_key_is_built_from_argv(name: str) -> None:
    findings = _argv_key_findings(_code((ROOT / name).read_text()))
    assert not findings, f"{name} builds a key from ARGV (pass the prefix as a KEY): {findings}"


@pytest.mark.parametrize("snippet", [
    "local tkey = ARGV[4] .. task_id",
    "local prefix = ARGV[7]\nlocal key = prefix .. id",
    "local a, p = ARGV[1], ARGV[2]\nrcall('HGET', p .. id, 'x')",
    "local ctx = {group = ARGV[1], task_prefix = ARGV[6]}\nlocal k = ctx.task_prefix .. id",
    "rcall('XACK', ARGV[5], group, id)",
    "redis.pcall('GET', ARGV[1])",
    "local stream = ARGV[i]\nlocal info = redis.pcall('XPENDING', stream, group)",
    "pcall(rcall, 'XGROUP', 'CREATE', ARGV[2], 'g', '0')",
])
def test_the_heuristic_sees_an_argv_key(snippet: str) -> None:
    assert _argv_key_findings(snippet)


@pytest.mark.parametrize("snippet", [
    "local tkey = KEYS[4] .. ARGV[1]",
    "local queue, prefix = ARGV[1], KEYS[2]\nlocal key = prefix .. id",
    "local ctx = {task_prefix = KEYS[8], now_ms = ARGV[3]}\nlocal k = ctx.task_prefix .. id",
    "rcall('SISMEMBER', KEYS[1], ARGV[1])",
    "local msg = 'attempt ' .. ARGV[1]",
])
def test_the_heuristic_lets_a_declared_key_pass(snippet: str) -> None:
    assert not _argv_key_findings(snippet)
