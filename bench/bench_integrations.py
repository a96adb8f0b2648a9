"""The hot-path cost of issue 25's integrations, on a throwaway Redis: the same drain (pre-filled
no-op tasks, one burst worker process) and one-by-one enqueue with each integration off and on,
interleaved round by round; ratios to "off" from the same run.

Modes: off (DTQ_OPENTELEMETRY=off, DTQ_SENTRY=off: as without those libraries); otel-api-only
(opentelemetry-api installed, no SDK: its no-op spans); tracing (the SDK, spans made and dropped
by the exporter, in the enqueuer and the worker); sentry (sentry_sdk initialised in the worker;
sentry-bare: without its default integrations);
middleware (one pass-through enqueue middleware that adds a header, one pass-through execution
middleware); signals (a receiver on every lifecycle signal, in the enqueuer and the worker);
encryption (DTQ_ENCRYPT_TYPES=* with one Fernet key).
Run: .venv/bin/python -m bench.bench_integrations [--tasks N] [--rounds R].
Results: bench/results/integrations-latest.{json,md}.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
django.setup()

from cryptography.fernet import Fernet  # noqa: E402

from . import dtq_bench as b  # noqa: E402
from .common import RESULTS, fmt, machine, markdown_table, median, now_iso, ratio, start_redis, write_results  # noqa: E402

KEY = Fernet.generate_key().decode()
OFF = {"DTQ_OPENTELEMETRY": "off", "DTQ_SENTRY": "off"}
HOOKS = "bench.tasks,bench.integration_hooks"
MODES: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {
    # mode: (worker environment, enqueuing engine's config); every mode but the tracing ones runs
    # with DTQ_OPENTELEMETRY=off and DTQ_SENTRY=off, as a project without those libraries does.
    "off": ({}, {}),
    # opentelemetry-api installed, no SDK configured: the API's no-op spans.
    "otel-api-only": ({"DTQ_OPENTELEMETRY": "auto"}, {"opentelemetry": "auto"}),
    # the SDK configured (spans made, then dropped by the exporter), in the worker and the enqueuer.
    "tracing": ({"DTQ_OPENTELEMETRY": "auto", "DTQ_TASK_MODULES": HOOKS, "DTQ_BENCH_TRACING": "1"},
                {"opentelemetry": "auto"}),
    # sentry_sdk initialised in the worker (no task fails: what an active client costs a success).
    "sentry": ({"DTQ_SENTRY": "auto", "DTQ_TASK_MODULES": HOOKS, "DTQ_BENCH_SENTRY": "1"}, {}),
    # the same without sentry-sdk's default integrations: what is left is dtq's own part.
    "sentry-bare": ({"DTQ_SENTRY": "auto", "DTQ_TASK_MODULES": HOOKS, "DTQ_BENCH_SENTRY": "bare"}, {}),
    "middleware": ({"DTQ_TASK_MODULES": "bench.tasks,bench.integration_hooks",
                    "DTQ_ENQUEUE_MIDDLEWARE": "bench.integration_hooks.PassEnqueue",
                    "DTQ_EXECUTION_MIDDLEWARE": "bench.integration_hooks.PassExecution"},
                   {"enqueue_middleware": ("bench.integration_hooks.PassEnqueue",)}),
    "signals": ({"DTQ_TASK_MODULES": "bench.tasks,bench.integration_hooks", "DTQ_BENCH_SIGNALS": "1"}, {}),
    "encryption": ({"DTQ_ENCRYPTION_KEYS": KEY, "DTQ_ENCRYPT_TYPES": "*"},
                   {"encryption_keys": (KEY,), "encrypt_types": ("*",)}),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_integrations", description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    server = start_redis("integrations")
    rig = b.Rig(server)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    try:
        for round_no in range(args.rounds):
            for mode in modes:
                env, config = MODES[mode]
                env, config = {**OFF, **env}, {"opentelemetry": "off", "sentry": "off", **config}
                provider = None
                if mode == "tracing":
                    from . import integration_hooks
                    provider = integration_hooks.configure_tracing()
                if mode == "signals":
                    from . import integration_hooks
                    integration_hooks.connect_receivers()  # idempotent: the same receiver once
                started = time.perf_counter()
                result = b.drain(rig, tasks=args.tasks, env=env, config=config)
                runs[mode].append(result)
                print(f"[round {round_no + 1}] {mode:<11} drain {fmt(result['drain_per_s'])}/s, enqueue "
                      f"{fmt(result['enqueue_single_per_s'])}/s one by one ({time.perf_counter() - started:.1f}s)",
                      flush=True)
                if provider is not None:  # back to no SDK for the other modes (no public reset)
                    from opentelemetry import trace
                    from opentelemetry.util._once import Once
                    provider.shutdown()
                    trace._TRACER_PROVIDER = None
                    trace._TRACER_PROVIDER_SET_ONCE = Once()
                if mode == "signals":
                    from dtq_tasks import signals
                    for signal in (signals.task_queued, signals.task_started, signals.task_succeeded,
                                   signals.task_failed, signals.task_dead_lettered):
                        signal.receivers.clear()
                        signal.sender_receivers_cache.clear()
    finally:
        server.stop()
    out: dict[str, Any] = {"when": now_iso(), "machine": machine(), "tasks": args.tasks, "rounds": args.rounds,
                           "modes": {}}
    base_drain = median([r["drain_per_s"] for r in runs.get("off", [])])
    base_enqueue = median([r["enqueue_single_per_s"] for r in runs.get("off", [])])
    rows = []
    for mode in modes:
        drain = median([r["drain_per_s"] for r in runs[mode]])
        enqueue = median([r["enqueue_single_per_s"] for r in runs[mode]])
        commands = median([r["redis_commands_per_task"] for r in runs[mode]])
        out["modes"][mode] = {"drain_per_s": drain, "enqueue_single_per_s": enqueue,
                              "redis_commands_per_task": commands}
        rows.append({"mode": mode, "drain": drain, "drain_ratio": ratio(drain, base_drain), "enqueue": enqueue,
                     "enqueue_ratio": ratio(enqueue, base_enqueue), "commands": commands})
    table = markdown_table([("mode", "mode"), ("drain", "drain/s"), ("drain_ratio", "vs off"),
                            ("enqueue", "enqueue/s one by one"), ("enqueue_ratio", "vs off"),
                            ("commands", "Redis commands/task")], rows)
    print(table)
    write_results("integrations", out, table, directory=RESULTS)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
