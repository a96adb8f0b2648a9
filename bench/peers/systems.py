"""The systems compared by `make bench-peers`: each in its default configuration and in the best
configuration found for a no-op task, as worker command lines for ONE worker process."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..common import ROOT

VENVS = {  # name -> (directory, pinned requirements); dtq uses its own .venv
    "peers": (ROOT / "var" / "bench-peers-venv", ROOT / "bench" / "requirements-peers.txt"),
    "peers-redis5": (ROOT / "var" / "bench-peers-venv-redis5", ROOT / "bench" / "requirements-peers-redis5.txt"),
}
APPS = "bench.peers.apps"


@dataclass(frozen=True)
class System:
    name: str
    config: str  # "default" or "best"
    venv: str  # "dtq" or a VENVS key
    module: str  # bench.peers.apps.<module>
    argv: tuple[str, ...]  # worker command; argv[0] is a script in the venv's bin/ (or "python")
    burst_flag: tuple[str, ...] = ()  # appended for the drain when the worker can exit when idle
    note: str = ""
    max_tasks: int | None = None  # cap for configurations too slow for the full drain
    env: dict[str, str] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.name} ({self.config})"


def _dtq(config: str, concurrency: int, note: str) -> System:
    return System("dtq", config, "dtq", "dtq_app",
                  ("python", "manage.py", "runworker_dtq", "--queues", "bench", "--concurrency", str(concurrency)),
                  burst_flag=("--burst",), note=note)


SYSTEMS: tuple[System, ...] = (
    _dtq("default", 10, "--concurrency 10 (the default)"),
    _dtq("best", 50, "--concurrency 50 (fastest of 10, 50, 100): fetch batches of up to 50"),
    System("celery", "default", "peers", "celery_app",
           ("celery", "-A", f"{APPS}.celery_app", "worker", "-Q", "bench", "-c", "1", "-l", "WARNING"),
           note="prefork pool with 1 child, prefetch multiplier 4", max_tasks=1500),
    System("celery", "best", "peers", "celery_app",
           ("celery", "-A", f"{APPS}.celery_app", "worker", "-Q", "bench", "-P", "solo", "--without-gossip",
            "--without-mingle", "--without-heartbeat", "--prefetch-multiplier", "100", "-l", "WARNING"),
           note="solo pool, no gossip/mingle/heartbeat, prefetch multiplier 100 (threads pool: slower)"),
    System("dramatiq", "default", "peers", "dramatiq_app",
           ("dramatiq", f"{APPS}.dramatiq_app", "--processes", "1", "-Q", "bench"),
           note="1 process, 8 threads (default)"),
    System("dramatiq", "best", "peers", "dramatiq_app",
           ("dramatiq", f"{APPS}.dramatiq_app", "--processes", "1", "--threads", "16", "-Q", "bench"),
           note="1 process, 16 threads (fastest of 1, 4, 8, 16, 32, 64)"),
    System("huey", "default", "peers", "huey_app",
           ("huey_consumer", f"{APPS}.huey_app.huey", "-q"), note="1 thread worker (default)"),
    System("huey", "best", "peers", "huey_app",
           ("huey_consumer", f"{APPS}.huey_app.huey", "-q"),
           note="the default: 1 thread worker was faster than 2, 4 or 8"),
    System("rq", "default", "peers", "rq_app", ("rq", "worker", "-q", "--url", "{url}", "bench"),
           burst_flag=("--burst",), note="forks a work horse per job", max_tasks=300),
    System("rq", "best", "peers", "rq_app",
           ("rq", "worker", "-q", "--url", "{url}", "--worker-class", "rq.worker.SimpleWorker", "bench"),
           burst_flag=("--burst",), note="SimpleWorker: jobs run in the worker process", max_tasks=4000),
    System("arq", "default", "peers-redis5", "arq_app", ("arq", f"{APPS}.arq_app.WorkerSettings"),
           burst_flag=("--burst",), note="max_jobs 10, poll_delay 0.5 s", max_tasks=1500),
    System("arq", "best", "peers-redis5", "arq_app", ("arq", f"{APPS}.arq_app.BestSettings"),
           burst_flag=("--burst",), note="max_jobs 100, poll_delay 0.01 s, keep_result 0"),
    System("saq", "default", "peers-redis5", "saq_app", ("saq", f"{APPS}.saq_app.settings", "--workers", "1"),
           note="concurrency 10 (default)"),
    System("saq", "best", "peers-redis5", "saq_app", ("saq", f"{APPS}.saq_app.best", "--workers", "1"),
           note="concurrency 100"),
    System("taskiq", "default", "peers", "taskiq_app",
           ("taskiq", "worker", f"{APPS}.taskiq_app:broker", "--workers", "1", "--log-level", "WARNING"),
           note="ListQueueBroker, 1 worker process"),
    System("taskiq", "best", "peers", "taskiq_app",
           ("taskiq", "worker", f"{APPS}.taskiq_app:broker", "--workers", "1", "--log-level", "WARNING",
            "--max-async-tasks", "10"),
           note="ListQueueBroker, max 10 async tasks (1000 was no faster)"),
)
