"""The hot-path scripts run as Redis functions (dtq_core/scripts/library.py): each library loads,
submits, fetches and completions are FCALLs, a node that lacks the functions gets them again on
the next call, and nothing one call leaves in a library's variables reaches the next call."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import time
import uuid

import pytest
import redis
import redis.cluster

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.scripts import _ROOT, LIBRARIES, _expand
from dtq_core.scripts.library import _REFUSED, FUNCTION_SCRIPTS, functions_refused, refuse_functions
from dtq_core.task import Outcome
from dtq_core.worker.executor import Completion, Row
from tests.redis_server import RedisServer

from .support import fetch, partitions, store

OPERATOR = Actor.cli()


def _calls(client: redis.Redis, command: str) -> int:
    """Calls of a command so far, on every master of a cluster."""
    if isinstance(client, redis.cluster.RedisCluster):
        per_node = list(client.info("commandstats", target_nodes=redis.cluster.RedisCluster.PRIMARIES).values())
    else:
        per_node = [client.info("commandstats")]
    return sum(int(info.get(f"cmdstat_{command}", {}).get("calls", 0)) for info in per_node)


def test_every_hot_path_library_loads_and_names_its_script_and_source(redis_client: redis.Redis) -> None:
    assert set(LIBRARIES) == FUNCTION_SCRIPTS == {"enqueueTask", "enqueueTasks", "fetchTasks", "completeTasks"}
    for name, library in LIBRARIES.items():
        redis_client.function_load(library.source, replace=True)  # raises if its top level runs anything
        assert library.function.startswith(f"dtq_{name}_") and len(library.function) == len(f"dtq_{name}_") + 16
    assert len({lib.function for lib in LIBRARIES.values()}) == 4


def _succeeded(rows: list[Row]) -> list[Completion]:
    return [Completion(r, Outcome.SUCCEEDED, result_json="null") for r in rows]


def test_a_task_is_submitted_fetched_and_completed_by_fcall_even_after_a_function_flush(
        engine: Engine, config: DtqConfig, redis_client: redis.Redis) -> None:
    served = partitions(engine, "fn")
    worker_store = store(config)
    redis_client.function_flush()  # a Redis restarted without persistence, or a new replica

    async def scenario() -> tuple[list[str], list[object]]:
        try:
            rows = await fetch(worker_store, served, 10)
            statuses = await worker_store.complete(_succeeded(rows))
            return [r.task_id for r in rows], statuses
        finally:
            await worker_store.aclose()

    fcalls, evalshas = _calls(redis_client, "fcall"), _calls(redis_client, "evalsha")
    task_id = engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="fn").id  # reloads the submit's library
    ran, statuses = asyncio.run(scenario())
    assert ran == [task_id] and statuses == ["SUCCEEDED"]
    assert redis_client.hget(engine.keys.task(task_id), "status") == "SUCCEEDED"
    # The submit, the fetch and the completion each an FCALL that failed (no function) and one
    # that ran; none fell back to an EVALSHA.
    assert _calls(redis_client, "fcall") - fcalls >= 3
    assert _calls(redis_client, "evalsha") == evalshas


def test_a_pause_seen_by_one_fetch_is_not_remembered_by_the_next(engine: Engine, config: DtqConfig) -> None:
    # claim.lua remembers a partition's pause for the rest of its call: in a function library a
    # variable of the include would outlive the call and keep a resumed queue paused.
    served = partitions(engine, "pz")
    task_id = engine.tasks.enqueue("dtq.echo", queue="pz").id
    worker_store = store(config)

    async def fetch_twice() -> tuple[list[str], list[str]]:
        try:
            engine.queues.pause("pz", OPERATOR)
            paused = [r.task_id for r in await fetch(worker_store, served, 10)]
            engine.queues.resume("pz", OPERATOR)
            return paused, [r.task_id for r in await fetch(worker_store, served, 10)]
        finally:
            await worker_store.aclose()

    assert asyncio.run(fetch_twice()) == ([], [task_id])


def test_an_expiry_after_a_batched_completion_still_writes_its_history(engine: Engine, config: DtqConfig,
                                                                       redis_client: redis.Redis) -> None:
    # completeTasks batches its history writes (history_batched) and flushes them at its end; a
    # fetch that expires a task writes at once. A flag left set by the completion would make the
    # fetch count the expiry and never write it.
    (served,) = partitions(engine, "hx")
    worker_store = store(config)
    first = engine.tasks.enqueue("dtq.echo", queue="hx").id

    async def complete_then_expire() -> tuple[list[object], list[Row]]:
        try:
            rows = await fetch(worker_store, [served], 10)
            statuses = await worker_store.complete(_succeeded(rows))
            await worker_store.write_samples()  # the worker's once-a-second write of its samples
            doomed = engine.tasks.enqueue("dtq.echo", queue="hx", ttl_seconds=0.05)
            expires_at = int(redis_client.hget(engine.keys.task(doomed.id), "expires_at"))
            while time.time() * 1000 <= expires_at + 5:  # until the clock has passed its expiry
                await asyncio.sleep(0.01)
            return statuses, await fetch(worker_store, [served], 10)
        finally:
            await worker_store.aclose()

    began_min = int(time.time() // 60)
    statuses, later = asyncio.run(complete_then_expire())
    assert statuses == ["SUCCEEDED"] and later == [] and first
    # The minutes the test ran in, by name (KEYS on a cluster client asks one node only).
    minute_keys = [f"{engine.keys.history(served.tag)}m:{m}" for m in range(began_min, int(time.time() // 60) + 1)]
    counts: dict[str, int] = {}
    for key in minute_keys:
        for name, n in redis_client.hgetall(key).items():
            counts[name] = counts.get(name, 0) + int(n)
    assert counts.get("dtq.echo|s") == 1 and counts.get("dtq.echo|e") == 1


@pytest.mark.single_node
def test_a_redis_that_refuses_functions_gets_evalsha_and_says_so_once_per_client(
        redis_server: RedisServer, config: DtqConfig, redis_client: redis.Redis,
        caplog: pytest.LogCaptureFixture) -> None:
    # An ACL user without FUNCTION and FCALL (as some managed Redis services set them): submits,
    # fetches and completions still work, as EVALSHAs, and the log says why once per client.
    user = f"nofunctions-{uuid.uuid4().hex[:8]}"
    redis_client.execute_command("ACL", "SETUSER", user, "on", ">pw", "~*", "&*", "+@all",
                                 "-function", "-fcall", "-fcall_ro")
    try:
        limited = dataclasses.replace(config, redis_url=redis_server.url.replace("redis://", f"redis://{user}:pw@"))
        engine = Engine(limited)
        served = partitions(engine, "acl")
        worker_store = store(limited)

        async def run() -> tuple[list[str], list[object]]:
            try:
                rows = await fetch(worker_store, served, 10)
                return [r.task_id for r in rows], await worker_store.complete(_succeeded(rows))
            finally:
                await worker_store.aclose()

        with caplog.at_level(logging.WARNING, logger="dtq"):
            task_id = engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="acl").id
            again = engine.tasks.enqueue("dtq.echo", {"n": 2}, queue="acl").id
            ran, statuses = asyncio.run(run())
        assert sorted(ran) == sorted([task_id, again]) and statuses == ["SUCCEEDED", "SUCCEEDED"]
        warnings = [r.getMessage() for r in caplog.records if "refuses FUNCTION LOAD" in r.getMessage()]
        # The engine's client and the worker's: each told once, whatever the calls that followed.
        assert len(warnings) == 2 and all("no permissions" in w for w in warnings), warnings
    finally:
        redis_client.execute_command("ACL", "DELUSER", user)


def test_a_library_that_does_not_load_is_an_error_not_a_refusal(redis_client: redis.Redis) -> None:
    # Only a refusal (no permission, an unknown command) turns functions off; a library Redis
    # cannot load is dtq's bug, raised where it is loaded.
    broken = redis.exceptions.ResponseError("Error registering functions: user_function:2: nonexistent global")
    with pytest.raises(redis.exceptions.ResponseError, match="Error registering functions"):
        refuse_functions(redis_client, broken)
    assert not functions_refused(redis_client)
    try:
        refuse_functions(redis_client, redis.exceptions.ResponseError("ERR unknown command 'FUNCTION'"))
        assert functions_refused(redis_client)
    finally:
        _REFUSED.discard(redis_client)  # the session's client: the other tests call functions


def test_the_compact_record_field_set_lists_the_same_fields_as_its_list(redis_client: redis.Redis) -> None:
    # RETAIN_FIELD (a literal set, built by no loop a library's loader could not run) must name
    # exactly RETAIN_FIELDS: a field missing from it would be dropped from a compact record.
    probe = (_ROOT / "includes" / "common.lua").read_text() + """
local listed, in_set = 0, 0
for _, name in ipairs(RETAIN_FIELDS) do
  listed = listed + 1
  if not RETAIN_FIELD[name] then return 'missing from the set: ' .. name end
end
for _ in pairs(RETAIN_FIELD) do in_set = in_set + 1 end
return listed .. ' ' .. in_set
"""
    listed, in_set = str(redis_client.eval(_expand(probe), 1, "dtq:{probe}:")).split()
    assert listed == in_set and int(listed) >= 20


def _hmget_into_table(source: str) -> tuple[list[str], list[tuple[str, int]]]:
    """The field names of the `local v = rcall('HMGET', tkey, ...)` in source, and the
    `name = v[i]` pairs of the table constructor after it."""
    match = re.search(r"local v = rcall\('HMGET', tkey, (.*?)\)\s*local t = \{(.*?)\}", source, re.S)
    assert match, "no HMGET read into a table constructor"
    names = re.findall(r"'([a-z_]+)'", match.group(1))
    pairs = [(name, int(i)) for name, i in re.findall(r"([a-z_]+) = v\[(\d+)\]", match.group(2))]
    return names, pairs


@pytest.mark.parametrize("script", ["completeTasks-1.lua", "includes/claim.lua"])
def test_a_record_read_by_position_names_each_field_as_it_was_read(script: str) -> None:
    # The hot-path reads build their table with a constructor from the HMGET's positions: a
    # field added to one list and not the other would be read as another field's value.
    names, pairs = _hmget_into_table((_ROOT / script).read_text())
    assert pairs == [(name, i) for i, name in enumerate(names, start=1)]


def test_a_claim_reads_the_task_fields_the_other_claim_readers_read() -> None:
    source = (_ROOT / "includes" / "claim.lua").read_text()
    listed = re.search(r"local TASK_FIELDS = \{(.*?)\}", source, re.S)
    assert listed
    assert _hmget_into_table(source)[0] == re.findall(r"'([a-z_]+)'", listed.group(1))
