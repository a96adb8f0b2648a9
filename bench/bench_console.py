"""Console page render times at scale: 1,000,000 waiting tasks, 100,000 dead letters, 10,000
scheduled, 200 queues and 30 days of history (target < 300 ms).

Run: .venv/bin/python -m bench.bench_console [--waiting N] [--dead N] [--queues Q] [--repeat R].
A throwaway Redis is filled server-side by Lua helpers (batches of XADD/HSET, so a million tasks
take seconds; every queue's history a minute per minute for 24 h and an hour per hour for 30 days,
with the leader's roll-ups), then every console page is rendered through Django's full request
stack (middleware, templates) R times; the report gives median, p95 and max per page and flags any
page over the target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

import django

django.setup()

from django.conf import settings  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import override_settings, setup_test_environment  # noqa: E402

from dtq_core.conf import reset_engine  # noqa: E402
from dtq_core.config import DtqConfig  # noqa: E402
from dtq_core.engine import Engine  # noqa: E402
from dtq_core.keys import Keys  # noqa: E402

from .common import percentile, start_redis  # noqa: E402

TARGET_MS = 300.0
QUEUES = ("default", "emails", "billing", "reports")
ERRORS = [("RuntimeError", "card declined by issuer (code 51)"), ("TimeoutError", "gateway timed out after 30s"),
          ("KeyError", "'customer_id'"), ("dtq.UnknownTaskType", "no handler registered for task type 'old.task'"),
          ("ValueError", "invalid literal for int() with base 10: 'abc'")]

# Fill helpers: run inside Redis so the bench spends seconds, not minutes, making a million
# tasks. Each works on one partition (KEYS[1], its key prefix), as dtq's own scripts do; task ids
# are "<tag>-<32 hex digits of n>" (task_id below).
FILL_WAITING = """
local p, now = KEYS[1], tonumber(ARGV[1])
local first, n, queue, priority, ttype = tonumber(ARGV[2]), tonumber(ARGV[3]), ARGV[4], ARGV[5], ARGV[6]
local tag = string.match(p, '{([^}]*)}')
local stream, recent = p .. 'stream:' .. queue .. ':' .. priority, p .. 'recent'
for i = first, first + n - 1 do
  local id = tag .. '-' .. string.format('%032x', i)
  local eid = redis.call('XADD', stream, '*', 'task_id', id, 'attempt', 1)
  redis.call('HSET', p .. 'task:' .. id, 'id', id, 'type', ttype, 'queue', queue, 'priority', priority,
             'payload', '{"order":' .. i .. ',"note":"bench"}', 'status', 'QUEUED', 'attempt', 0,
             'max_attempts', 5, 'timeout_s', 300, 'created_at', now - i, 'updated_at', now - i,
             'enqueued_at', now - i, 'entry_id', eid)
  if i % 10 == 0 then redis.call('ZADD', recent, now - i, id) end
end
return n
"""
FILL_DEAD = """
local p, now = KEYS[1], tonumber(ARGV[1])
local first, n, step, base, queue = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local types, errors = {'billing.charge', 'emails.send', 'reports.build'}, cjson.decode(ARGV[7])
local tag = string.match(p, '{([^}]*)}')
for k = 0, n - 1 do
  local i = first + k * step
  local id = tag .. '-' .. string.format('%032x', base + i)
  local err, ttype = errors[(i % #errors) + 1], types[(i % 3) + 1]
  local eid = redis.call('XADD', p .. 'dlq', '*', 'task_id', id, 'queue', queue, 'type', ttype, 'attempt', 5,
                         'error_class', err[1], 'error', err[2], 'failed_at', now - i)
  redis.call('HINCRBY', p .. 'dlq:counts', queue, 1)
  redis.call('HSET', p .. 'task:' .. id, 'id', id, 'type', ttype, 'queue', queue, 'priority', 'normal',
             'payload', '{"customer":"cus_' .. i .. '"}', 'status', 'DEAD_LETTERED', 'attempt', 5,
             'max_attempts', 5, 'created_at', now - i, 'updated_at', now - i, 'dlq_entry_id', eid,
             'last_error', err[1] .. ': ' .. err[2],
             'errors', '[{"attempt":5,"error":"' .. err[1] .. '","message":"bench","traceback":"",' ..
                       '"at":"2026-01-01T00:00:00.000Z"}]')
end
return n
"""
# A history scope (a partition's, or a global roll-up's: KEYS[1] its prefix) with a minute hash for
# each of the last 24 h, an hour hash for each of the 30 days before and a day hash for each of the
# last 31 days: every field of ARGV[5]
# (JSON [[name, base], ...]) set to base plus a little wobble.
FILL_HISTORY = """
local p, now_min, minutes, now_hour, hours = KEYS[1], tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3]),
                                             tonumber(ARGV[4])
local fields = cjson.decode(ARGV[5])
local function fill(key, i, scale)
  local args = {}
  for _, f in ipairs(fields) do
    args[#args + 1] = f[1]
    args[#args + 1] = (f[2] + (i % 7)) * scale
  end
  redis.call('HSET', key, unpack(args))
  redis.call('PEXPIRE', key, 2764800000)
end
for m = now_min - minutes + 1, now_min do fill(p .. 'm:' .. m, m, 1) end
for h = now_hour - hours, now_hour - 1 do fill(p .. 'h:' .. h, h, 60) end
for d = math.floor(now_hour / 24) - 31, math.floor(now_hour / 24) - 1 do fill(p .. 'd:' .. d, d, 1440) end
return 1
"""
DEAD_BASE = 10**12  # dead letters' task numbers, apart from the waiting tasks'


def task_id(tag: str, n: int) -> str:
    return f"{tag}-{n:032x}"


@dataclass
class Filled:
    took_s: float
    waiting: list[tuple[range, str]]  # task numbers -> their partition's tag
    dead_tags: dict[str, str]  # queue -> tag

    def waiting_task(self, n: int) -> str:
        return next(task_id(tag, n) for numbers, tag in self.waiting if n in numbers)

    def dead_task(self, n: int) -> str:
        return task_id(self.dead_tags[QUEUES[n % len(QUEUES)]], DEAD_BASE + n)


def fill_history(engine: Engine, tags: dict[str, str]) -> None:
    """30 days of history for every queue (24 h of minutes, then hours), and the leader's roll-ups
    and folded marks as a running deployment has them."""
    import json

    import redis

    k, now = engine.keys, engine.clock.now_ms()
    # A client of its own: a scope of 200 depth fields takes longer than the engine's read timeout.
    client = redis.Redis.from_url(engine.config.redis_url, socket_timeout=300, decode_responses=True)
    now_min, now_hour = now // 60000, now // 3600000
    script = client.register_script(FILL_HISTORY)
    metrics = [["s", 40], ["r", 1], ["d", 1], ["w8", 20], ["w10", 15], ["w12", 5], ["r6", 10], ["r8", 20],
               ["r10", 8], ["r14", 2]]
    for queue, tag in tags.items():
        fields = [[f"{queue}.work|{m}", n] for m, n in metrics]
        script(keys=[k.history(tag)], args=[now_min, 1440, now_hour, 720, json.dumps(fields)])
    script(keys=[k.global_history("all")],
           args=[now_min, 1440, now_hour, 720, json.dumps([[m, n * len(tags)] for m, n in metrics])])
    types = [f"type{i:02d}.work" for i in range(20)]
    script(keys=[k.global_history("types")], args=[now_min, 1440, now_hour, 720, json.dumps(
        [[f"{t}|{m}", n * len(tags) // 20 + 1] for t in types for m, n in metrics])])
    script(keys=[k.global_history("depth")], args=[now_min, 1440, now_hour, 720, json.dumps(
        [[q, 100] for q in tags] + [["*", 100 * len(tags)]])])
    folded: dict[str, int] = {"minute": now_min - 3}
    for scope in [*tags.values(), "all", "types", "depth"]:
        folded.update({f"hour:{scope}": now_hour - 1, f"day:{scope}": now_hour // 24 - 1})
    client.hset(k.history_folded(), mapping=folded)


def fill(engine: Engine, waiting: int, dead: int, queues: int = len(QUEUES)) -> Filled:
    """Make `waiting` queued tasks spread over queues and priorities, `dead` dead letters, the
    rest, and `queues` queues in all (the others hold history only)."""
    import json

    started = time.perf_counter()
    client, k, now = engine.client, engine.keys, engine.clock.now_ms()
    fill_waiting, fill_dead = client.register_script(FILL_WAITING), client.register_script(FILL_DEAD)
    # Registered and opened as a first submit does (one partition each: DTQ_QUEUE_PARTITIONS unset).
    tags = {queue: engine.registry.ensure(queue).tags[0] for queue in QUEUES}
    extra = {f"q{i:03d}": engine.registry.ensure(f"q{i:03d}").tags[0] for i in range(max(0, queues - len(QUEUES)))}
    fill_history(engine, {**tags, **extra})
    # 70% normal, 20% high, 10% low; most work waits in "default" and "emails".
    plan = [("default", "normal", 0.45), ("default", "high", 0.15), ("emails", "normal", 0.2),
            ("emails", "low", 0.1), ("billing", "high", 0.05), ("reports", "normal", 0.05)]
    first = 0
    ranges: list[tuple[range, str]] = []
    for queue, priority, share in plan:
        count = int(waiting * share) if (queue, priority) != plan[-1][:2] else waiting - first
        for start in range(first, first + count, 10_000):
            n = min(10_000, first + count - start)
            fill_waiting(keys=[k.partition(tags[queue])], args=[now, start, n, queue, priority, f"{queue}.work"])
        ranges.append((range(first, first + count), tags[queue]))
        first += count
    for j, queue in enumerate(QUEUES):  # dead letter n is of queue QUEUES[n % 4]
        numbers = range(j, dead, len(QUEUES))
        for start in range(0, len(numbers), 10_000):
            chunk = numbers[start:start + 10_000]
            fill_dead(keys=[k.partition(tags[queue])],
                      args=[now, chunk.start, len(chunk), chunk.step, DEAD_BASE, queue, json.dumps(ERRORS)])
    # Some in flight (pending in the group), a schedule, workers, a leader and an audit trail.
    client.xreadgroup(Keys.GROUP, "bench-worker", {k.stream(tags["default"], "default", "high"): ">"}, count=200)
    pipe = client.pipeline(transaction=False)
    for i in range(10_000):
        pipe.zadd(k.schedule(tags["default"]), {task_id(tags["default"], i): now + 1000 * i})
    pipe.hset(k.schedule_counts(tags["default"]), "default", 10_000)
    for i in range(20):
        wid = f"bench-host:{1000 + i}"
        pipe.zadd(k.workers(), {wid: now - i * 100})
        pipe.hset(k.worker(wid), mapping={"hostname": "bench-host", "pid": 1000 + i, "queues": "",
                                          "concurrency": 10, "in_flight": 10, "processed": 123456,
                                          "started_at": now - 3_600_000})
    pipe.set(k.leader(), "bench-host:1000")
    for i in range(10_000):
        pipe.xadd(k.audit(), {"ts": now - i, "actor": f"user:op{i % 7}", "source": ("api", "console", "cli")[i % 3],
                              "action": ("dlq.retry", "queue.pause", "task.cancel")[i % 3],
                              "target": "dlq:all", "count": i, "request_id": f"req-{i}"})
    pipe.execute()
    return Filled(took_s=time.perf_counter() - started, waiting=ranges,
                  dead_tags={queue: tags[queue] for queue in QUEUES})


def pages(engine: Engine, filled: Filled, waiting: int, dead: int) -> dict[str, str]:
    deep = engine.queues.waiting("default", limit=500)
    for _ in range(3):  # a cursor a few pages in, to show paging by stream id does not slow down
        if deep.next_cursor:
            deep = engine.queues.waiting("default", after=deep.next_cursor, limit=500)
    dlq_deep = engine.dlq.list(limit=500)
    return {
        "overview": "/",
        "state.json": "/console/state.json",
        "queue default": "/queues/default/",
        "queue default (deep cursor)": f"/queues/default/?cursor={deep.next_cursor or ''}",
        "queue emails (low tail)": "/queues/emails/",
        "purge confirm": "/queues/default/purge/confirm",
        "tasks (recent)": "/tasks/",
        "tasks (status filter)": "/tasks/?status=QUEUED&queue=emails",
        "task": f"/tasks/{filled.waiting_task(min(12345, waiting - 1))}/",
        "dead task": f"/tasks/{filled.dead_task(min(4242, dead - 1))}/",
        "dlq": "/dlq/",
        "dlq (page 2)": f"/dlq/?cursor={dlq_deep.next_cursor or ''}",
        "dlq (queue filter)": "/dlq/?queue=billing",
        "dlq (type filter)": "/dlq/?type=reports.build",
        "dlq (text search)": "/dlq/?q=timed+out",
        "dlq (rare text)": "/dlq/?q=cus_99999",
        "dlq confirm (all)": "/dlq/matching/confirm?action=retry",
        "dlq confirm (queue)": "/dlq/matching/confirm?action=retry&queue=billing",
        "dlq confirm (type+text)": "/dlq/matching/confirm?action=discard&type=emails.send&q=declined",
        "schedule": "/schedule/",
        "overview (history 24h)": "/?range=24h",
        "overview (history 30d)": "/?range=30d",
        "queue default (history 30d)": "/queues/default/?range=30d",
        "types (30d)": "/types/?range=30d",
        "type (30d)": "/types/default.work/?range=30d",
        "history fragment (queue, 24h)": "/history/fragment?view=queue&queue=emails&range=24h",
        "tasks (text search)": "/tasks/?q=order%22%3A999999",
        "tasks (id prefix)": f"/tasks/?id={filled.waiting_task(min(12345, waiting - 1))[:14]}",
        "tasks (time range)": "/tasks/?after=2000-01-01T00%3A00&before=2100-01-01T00%3A00&queue=emails",
        "running": "/tasks/running/",
        "workers": "/workers/",
        "audit": "/audit/",
        "audit (filter)": "/audit/?actor=user:op3&source=cli",
    }


def measure(client: Client, path: str, repeat: int) -> list[float]:
    client.get(path)  # warm up templates and connections
    out = []
    for _ in range(repeat):
        started = time.perf_counter()
        response = client.get(path)
        out.append((time.perf_counter() - started) * 1000)
        if response.status_code != 200:
            raise SystemExit(f"{path}: HTTP {response.status_code}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_console", description=__doc__.splitlines()[0])
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--queues", type=int, default=200, help="queues in all (default 200)")
    args = parser.parse_args(argv)
    if args.waiting < 1000 or args.dead < 1000:
        parser.error("--waiting and --dead must be at least 1000")
    server = start_redis("console")
    try:
        config = DtqConfig(redis_url=server.url, key_prefix="bench", dlq_maxlen=max(args.dead, 1))
        engine = Engine(config)
        print(f"filling redis: {args.waiting:,} waiting tasks, {args.dead:,} dead letters, {args.queues} queues, "
              "30 days of history ...", flush=True)
        filled = fill(engine, args.waiting, args.dead, args.queues)
        memory = engine.client.info("memory")["used_memory_human"]
        print(f"filled in {filled.took_s:.1f} s (redis used_memory {memory})", flush=True)
        setup_test_environment()
        results: list[dict[str, Any]] = []
        with override_settings(DTQ={**settings.DTQ, "REDIS_URL": server.url, "KEY_PREFIX": "bench",
                                    "DLQ_MAXLEN": max(args.dead, 1)}, ALLOWED_HOSTS=["testserver"]):
            reset_engine()
            client = Client()
            for name, path in pages(engine, filled, args.waiting, args.dead).items():
                times = measure(client, path, args.repeat)
                results.append({"page": name, "median": statistics.median(times), "p95": percentile(times, 95),
                                "max": max(times)})
        width = max(len(r["page"]) for r in results)
        print(f"\n{'page':<{width}}  median ms   p95 ms   max ms")
        slow = []
        for r in results:
            flag = "" if r["p95"] < TARGET_MS else "  OVER TARGET"
            if flag:
                slow.append(r["page"])
            print(f"{r['page']:<{width}}  {r['median']:9.1f} {r['p95']:8.1f} {r['max']:8.1f}{flag}")
        print(f"\ntarget: p95 < {TARGET_MS:.0f} ms per page with {args.waiting:,} waiting tasks, "
              f"{args.dead:,} dead letters, {args.queues} queues and 30 days of history: "
              f"{'PASS' if not slow else 'FAIL (' + ', '.join(slow) + ')'}")
        return 0 if not slow else 1
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
