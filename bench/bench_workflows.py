"""A group of 10,000 steps with a callback (issue 23), on a throwaway Redis: the time to submit it
(its definitions and its 10,000 first tasks written in batches of 500 per script call), the time
until its callback has run, and that the callback ran exactly once with every member's result.

Run: .venv/bin/python -m bench.bench_workflows [--steps N] [--concurrency C] [--workers W].
The members and the callback are run by in-process workers (asyncio, like bench_dlq's), so the
figure is dtq's own cost: Redis, the scripts, the worker's fetch/complete/advance loop.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

import django

django.setup()

import dtq_tasks  # noqa: E402
from dtq_core.clock import iso  # noqa: E402
from dtq_core.config import DtqConfig  # noqa: E402
from dtq_core.engine import Engine  # noqa: E402
from dtq_core.worker import Worker  # noqa: E402

from .common import start_redis  # noqa: E402

CALLS: list[int] = []  # the callback's runs in this process (its workers are in-process)


@dtq_tasks.task("bench.wf_member")
async def member(payload: dict[str, Any]) -> int:
    return int(payload["n"])


@dtq_tasks.task("bench.wf_sum")
async def total(payload: dict[str, Any]) -> int:
    ctx = dtq_tasks.current_task()
    assert ctx is not None
    CALLS.append(len(ctx.parent_result))
    return sum(ctx.parent_result)


async def run_until(config: DtqConfig, done: Any, *, workers: int, concurrency: int, timeout_s: float) -> float:
    """Run workers until done() is true; return when that was seen (perf_counter)."""
    fleet = [Worker(config, concurrency=concurrency, name=f"bench-wf-{i}") for i in range(workers)]
    runs = [asyncio.create_task(w.run()) for w in fleet]
    deadline = time.perf_counter() + timeout_s
    try:
        while True:
            if done():
                return time.perf_counter()
            if time.perf_counter() > deadline:
                raise TimeoutError(f"not done after {timeout_s:g}s")
            await asyncio.sleep(0.02)
    finally:
        for w in fleet:
            w.request_stop()
        await asyncio.gather(*runs, return_exceptions=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_workflows", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000, help="members of the group (default 10000)")
    parser.add_argument("--workers", type=int, default=1, help="in-process workers (default 1)")
    parser.add_argument("--concurrency", type=int, default=200, help="each worker's concurrency (default 200)")
    args = parser.parse_args(argv)
    import logging

    logging.getLogger("dtq").setLevel(logging.ERROR)
    server = start_redis("workflows")
    try:
        config = DtqConfig(redis_url=server.url, key_prefix="benchwf", workflow_max_steps=args.steps + 1,
                           accept_unknown_types=True, max_queue_depth=0,
                           succeeded_retention_count=0)  # the members' records are read after the run
        engine = Engine(config)
        spec = dtq_tasks.group([dtq_tasks.step(member, {"n": n}) for n in range(args.steps)],
                               then=dtq_tasks.step(total)).to_dict()
        started = time.perf_counter()
        wid = engine.workflows.submit(spec)
        submitted = time.perf_counter()
        done = asyncio.run(run_until(config, lambda: engine.client.hget(engine.keys.workflow(wid), "status")
                                     != "RUNNING", workers=args.workers, concurrency=args.concurrency, timeout_s=600))
        wf = engine.workflows.get(wid)
        callback = engine.tasks.get(wf["steps"][-1]["task_id"])
        assert wf["status"] == "SUCCEEDED", wf["status"]
        assert len(CALLS) == 1 and CALLS[0] == args.steps, CALLS  # exactly once, with every member's result
        assert callback["result"] == args.steps * (args.steps - 1) // 2 and callback["attempt"] == 1
        pipe = engine.client.pipeline(transaction=False)
        for s in wf["steps"][:-1]:
            pipe.hget(engine.keys.task(s["task_id"]), "finished_at")
        last_member = iso(max(int(f) for f in pipe.execute()))
        print(f"group of {args.steps} steps + callback, {args.workers} worker(s) x {args.concurrency}")
        print(f"submit: {submitted - started:.2f} s ({args.steps / (submitted - started):,.0f} steps/s)")
        print(f"submit to callback done: {done - started:.2f} s ({args.steps / (done - started):,.0f} steps/s "
              "end to end)")
        print(f"last member finished {last_member}, callback started {callback['started_at']} "
              f"(the advance that created it and the fetch that ran it)")
        print(f"callback ran {len(CALLS)} time(s), with {CALLS[0]} results; sum {callback['result']}")
        # The same 10,000 tasks without a workflow: submitted in batches, drained by the same workers.
        started = time.perf_counter()
        for i in range(0, args.steps, 500):
            engine.tasks.enqueue_many([engine.tasks.validate("bench.wf_member", {"n": n}, queue="plain")
                                       for n in range(i, min(args.steps, i + 500))])
        submitted_plain = time.perf_counter()
        drained = asyncio.run(run_until(config, lambda: not engine.queues.get("plain")["waiting"]
                                        and not engine.queues.get("plain")["pending"], workers=args.workers,
                                        concurrency=args.concurrency, timeout_s=600))
        print(f"baseline, {args.steps} plain tasks: submit {submitted_plain - started:.2f} s, "
              f"submit to drained {drained - started:.2f} s")
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main())
