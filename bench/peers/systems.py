"""The systems compared by `make bench-peers`, as worker command lines for ONE worker process.

SYSTEMS is what a run measures: dtq at its defaults and at its best --concurrency, and each peer
in the configuration that won the exploration (`python -m bench.peers --explore`, which drains
every configuration of CANDIDATES; its figures are in docs/performance.md). A configuration
belongs to one body kind ("sync" or "async"): the winner may differ between the two.

Nobody gets a mode of its own: every worker runs as a normal, long-lived worker (no burst or
exit-when-idle flag) and is stopped by SIGTERM once the drain is measured.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common import ROOT

VENVS = {  # name -> (directory, pinned requirements); dtq uses its own .venv
    "peers": (ROOT / "var" / "bench-peers-venv", ROOT / "bench" / "requirements-peers.txt"),
    "peers-redis5": (ROOT / "var" / "bench-peers-venv-redis5", ROOT / "bench" / "requirements-peers-redis5.txt"),
}
APPS = "bench.peers.apps"
BODIES = ("sync", "async")
# Peers without async task bodies: listed as n/a in the async table.
SYNC_ONLY = ("celery", "dramatiq", "huey", "rq")


@dataclass(frozen=True)
class System:
    name: str  # "dtq", "celery", ..., "taskiq-list", "taskiq-stream"
    config: str  # short name of the configuration, e.g. "default", "best", "t1 p64"
    body: str  # "sync" or "async"
    venv: str  # "dtq" or a VENVS key
    module: str  # bench.peers.apps.<module>
    argv: tuple[str, ...]  # worker command; argv[0] is a script in the venv's bin/ (or "python")
    note: str = ""
    max_tasks: int | None = None  # cap for configurations too slow for the full drain
    env: tuple[tuple[str, str], ...] = field(default_factory=tuple)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.config})"

    @property
    def key(self) -> str:
        return f"{self.body}: {self.label}"


# --- worker command builders (one per system; each knob is an argument) ---

def dtq(body: str, concurrency: int, config: str) -> System:
    return System("dtq", config, body, "dtq", "dtq_app",
                  ("python", "manage.py", "runworker_dtq", "--queues", "bench", "--concurrency", str(concurrency)),
                  note=f"--concurrency {concurrency}" + (" (the default)" if concurrency == 10 else ""))


def celery(pool: str, prefetch: int, config: str, concurrency: int = 1) -> System:
    argv = ["celery", "-A", f"{APPS}.celery_app", "worker", "-Q", "bench", "-P", pool, "--prefetch-multiplier",
            str(prefetch), "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "WARNING"]
    if pool != "solo":
        argv += ["-c", str(concurrency)]
    pool_note = pool if pool == "solo" else f"{pool} pool, {concurrency} {'child' if pool == 'prefork' else 'thread'}"
    return System("celery", config, "sync", "peers", "celery_app", tuple(argv),
                  note=f"{pool_note}{'' if pool != 'solo' else ' pool'}, prefetch multiplier {prefetch}, "
                       "no gossip/mingle/heartbeat", max_tasks=5000)


def dramatiq(threads: int, prefetch: int, config: str) -> System:
    return System("dramatiq", config, "sync", "peers", "dramatiq_app",
                  ("dramatiq", f"{APPS}.dramatiq_app", "--processes", "1", "--threads", str(threads), "-Q", "bench"),
                  note=f"1 process, {threads} thread(s), queue prefetch {prefetch}",
                  env=(("dramatiq_queue_prefetch", str(prefetch)),))


def huey(workers: int, quiet_extras: bool, config: str) -> System:
    argv = ["huey_consumer", f"{APPS}.huey_app.huey", "-q", "-k", "thread", "-w", str(workers)]
    if quiet_extras:
        argv += ["-n", "-C"]
    return System("huey", config, "sync", "peers", "huey_app", tuple(argv),
                  note=f"{workers} thread worker(s)" + (", -n -C (no periodic tasks, no health check)"
                                                       if quiet_extras else ""))


def rq(simple: bool, config: str) -> System:
    argv = ["rq", "worker", "-q", "--url", "{url}", "bench"]
    if simple:
        argv[-1:-1] = ["--worker-class", "rq.worker.SimpleWorker"]
    return System("rq", config, "sync", "peers", "rq_app", tuple(argv),
                  note=("SimpleWorker: jobs run in the worker process" if simple
                        else "Worker: forks a work horse per job"),
                  max_tasks=4000 if simple else 300)


def arq(max_jobs: int, poll_delay: float, keep_result: int, config: str) -> System:
    return System("arq", config, "async", "peers-redis5", "arq_app", ("arq", f"{APPS}.arq_app.WorkerSettings"),
                  note=f"max_jobs {max_jobs}, poll_delay {poll_delay:g} s, keep_result {keep_result} s",
                  max_tasks=1500 if poll_delay >= 0.5 else None,
                  env=(("BENCH_ARQ_MAX_JOBS", str(max_jobs)), ("BENCH_ARQ_POLL_DELAY", str(poll_delay)),
                       ("BENCH_ARQ_KEEP_RESULT", str(keep_result))))


def saq(body: str, concurrency: int, config: str) -> System:
    return System("saq", config, body, "peers-redis5", "saq_app", ("saq", f"{APPS}.saq_app.settings", "--workers", "1"),
                  note=f"concurrency {concurrency}" + (" (the default)" if concurrency == 10 else ""),
                  env=(("BENCH_SAQ_CONCURRENCY", str(concurrency)),))


def taskiq(broker: str, body: str, max_async_tasks: int | None, config: str) -> System:
    argv = ["taskiq", "worker", f"{APPS}.taskiq_app:broker", "--workers", "1", "--log-level", "WARNING"]
    if max_async_tasks is not None:
        argv += ["--max-async-tasks", str(max_async_tasks)]
    kind = "ListQueueBroker (at most once)" if broker == "list" else "RedisStreamBroker (at least once)"
    return System(f"taskiq-{broker}", config, body, "peers", "taskiq_app", tuple(argv),
                  note=f"{kind}, 1 worker process, max async tasks "
                       + (str(max_async_tasks) if max_async_tasks is not None else "100 (the default)"),
                  env=(("BENCH_TASKIQ_BROKER", broker),))


# --- what `--explore` drains: the knobs that matter for each system ---

def candidates() -> list[System]:
    out: list[System] = []
    for body in BODIES:
        out += [dtq(body, c, f"c{c}") for c in (10, 50, 100)]
    out += [celery(pool, pm, f"{pool} pm{pm}", concurrency=8 if pool == "threads" else 1)
            for pool in ("prefork", "solo", "threads") for pm in (4, 64)]
    out += [dramatiq(t, p, f"t{t} p{p}") for t in (1, 8, 16) for p in (1, 64, 256)]
    out += [huey(w, nc, f"w{w}{' -n -C' if nc else ''}") for w in (1, 2, 4) for nc in (False, True)]
    out += [rq(False, "Worker"), rq(True, "SimpleWorker")]
    out += [arq(10, 0.5, 3600, "default"), arq(10, 0.01, 0, "j10 p0.01"), arq(100, 0.01, 0, "j100 p0.01"),
            arq(100, 0.5, 0, "j100 p0.5")]
    for body in BODIES:
        out += [saq(body, c, f"c{c}") for c in (10, 50, 100)]
        out += [taskiq(b, body, m, f"m{m or 100}") for b in ("list", "stream") for m in (None, 10)]
    return out


# --- what a run measures: the winners of the exploration recorded in docs/performance.md ---

SYSTEMS: tuple[System, ...] = (
    dtq("sync", 10, "default"),
    dtq("sync", 50, "best"),
    celery("solo", 64, "best"),
    dramatiq(1, 64, "best"),
    huey(2, True, "best"),
    rq(True, "best"),
    saq("sync", 10, "best"),
    taskiq("list", "sync", None, "best"),
    taskiq("stream", "sync", 10, "best"),
    dtq("async", 10, "default"),
    dtq("async", 100, "best"),
    # arq: poll_delay 0.01 s drained fastest on the idle machine (and is what a latency run
    # needs: poll_delay spaces every poll, busy or idle, so 0.5 s adds up to 500 ms per task).
    arq(100, 0.01, 0, "best"),
    saq("async", 10, "best"),
    taskiq("list", "async", None, "best"),
    taskiq("stream", "async", 10, "best"),
)
