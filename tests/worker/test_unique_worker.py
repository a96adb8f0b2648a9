"""A real worker process runs a debounced task (issue 22): its start waits for the window after
the last submit, and the payload it runs with is the last one."""

from __future__ import annotations

import time
from collections.abc import Callable

import redis

from dtq_core.config import DtqConfig
from dtq_core.engine import Engine

from ..conftest import WorkerProcess, wait_for


def test_debounce_delays_the_start_and_the_last_payload_runs(config: DtqConfig, redis_client: redis.Redis,
                                                            start_worker: Callable[..., WorkerProcess]) -> None:
    engine = Engine(config)  # the system clock: the worker's leader queues the task by it
    worker = start_worker("--queues", "uq", "--name", "debouncer")
    wait_for(lambda: redis_client.zscore(engine.keys.workers(), "debouncer"), message=worker.output)

    def submit(n: int) -> tuple[str, int]:
        before = engine.clock.now_ms()  # the submit's own now is this or later
        out = engine.tasks.enqueue("dtq.echo", {"n": n}, queue="uq", unique_key="autosave", unique_mode="debounce",
                                   unique_window_s=1.5, record=False)
        return out.id, before

    first, _ = submit(1)
    for n in (2, 3):
        time.sleep(0.5)  # the gap between a user's edits, not a wait for anything
        assert engine.tasks.get(first)["status"] == "PENDING"
        task_id, last_ms = submit(n)
        assert task_id == first
    done = wait_for(lambda: (t := engine.tasks.get(first))["status"] == "SUCCEEDED" and t, timeout=20,
                    message=worker.output)
    assert done["result"] == {"n": 3} and done["attempt"] == 1
    started_ms = int(redis_client.hget(engine.keys.task(first), "started_at"))
    assert started_ms >= last_ms + 1500  # the window counts from the last submit
    # It has run: the next submit is a new debounced task, which runs with its own payload.
    again, _ = submit(4)
    assert again != first
    wait_for(lambda: engine.tasks.get(again)["status"] == "SUCCEEDED", timeout=20, message=worker.output)
    assert engine.tasks.get(again)["result"] == {"n": 4}


def test_while_active_holds_a_running_task_and_frees_its_key_when_it_succeeds(
        config: DtqConfig, redis_client: redis.Redis, start_worker: Callable[..., WorkerProcess]) -> None:
    engine = Engine(config)
    worker = start_worker("--queues", "uq")

    def submit() -> str:
        return engine.tasks.enqueue("dtq.sleep", {"seconds": 1}, queue="uq", unique_key="import",
                                    unique_mode="while_active", record=False).id

    first = submit()
    wait_for(lambda: engine.tasks.get(first)["status"] == "RUNNING", message=worker.output)
    assert submit() == first
    wait_for(lambda: engine.tasks.get(first)["status"] == "SUCCEEDED", message=worker.output)
    second = submit()
    assert second != first
    wait_for(lambda: engine.tasks.get(second)["status"] == "SUCCEEDED", message=worker.output)
