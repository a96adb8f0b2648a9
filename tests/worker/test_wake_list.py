"""An idle worker that serves one partition waits on the partition's wake list with its fetch
queued behind the BLPOP (dtq_core/worker/fetch.py, _wait_on_list): a submit's ring hands it the
task already claimed, in the round trip that wakes it. The wake channel still runs beside it, and
a wake-up it brings, or a stop, ends the wait early through the worker's own list."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import pytest
import redis

from dtq_core.clock import FakeClock
from dtq_core.config import DtqConfig
from dtq_core.connection import async_client
from dtq_core.engine import Engine
from dtq_core.engine.audit import Actor
from dtq_core.worker import fetch as fetch_module
from dtq_core.worker.runtime import Worker
from dtq_core.worker.store import Fetched, WorkerStore
from dtq_core.worker.wake import WakeSubscription

from .support import tag
from .test_worker_behaviour import make_engine, run_burst, running_worker, status_once


class Waits:
    """Every worker's waits on a wake list, and what each brought back (a spy on the store's
    method, installed before the workers start: the calls still go to Redis)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started: dict[str, int] = {}
        self.waiting: set[str] = set()  # worker ids in a wait now
        self.claimed: dict[str, list[str]] = {}  # task ids the waits' fetches claimed, per worker
        self.fetches: dict[str, int] = {}  # the other fetches (of ready partitions), per worker
        real: Callable[..., Any] = WorkerStore.wait_and_fetch
        real_fetch: Callable[..., Any] = WorkerStore.fetch
        waits = self

        async def fetch(store: WorkerStore, *args: Any, **kwargs: Any) -> Fetched:
            waits.fetches[store.worker_id] = waits.fetches.get(store.worker_id, 0) + 1
            fetched: Fetched = await real_fetch(store, *args, **kwargs)
            return fetched

        async def wait_and_fetch(store: WorkerStore, *args: Any, **kwargs: Any) -> Fetched:
            me = store.worker_id
            waits.started[me] = waits.started.get(me, 0) + 1
            waits.waiting.add(me)
            try:
                fetched: Fetched = await real(store, *args, **kwargs)
            finally:
                waits.waiting.discard(me)
            waits.claimed.setdefault(me, []).extend(row.task_id for row in fetched.rows)
            return fetched

        monkeypatch.setattr(WorkerStore, "wait_and_fetch", wait_and_fetch)
        monkeypatch.setattr(WorkerStore, "fetch", fetch)

    async def blocked(self, worker: Worker, timeout: float = 10) -> None:
        """Until the worker is in a wait on its partition's list."""
        deadline = time.monotonic() + timeout
        while worker.worker_id not in self.waiting:
            assert time.monotonic() < deadline, "the idle worker never waited on its wake list"
            await asyncio.sleep(0.01)


@pytest.fixture
def waits(monkeypatch: pytest.MonkeyPatch) -> Waits:
    return Waits(monkeypatch)


@pytest.fixture
def long_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Waits that would outlast the test unless something ends them early."""
    monkeypatch.setattr(fetch_module, "BLOCK_MS", 60_000)


def test_a_ring_leaves_one_token_however_many_submits_arrive(engine: Engine) -> None:
    for _ in range(5):
        engine.tasks.enqueue("dtq.echo", queue="mail")
    engine.tasks.enqueue_many([engine.tasks.validate("dtq.echo", queue="mail") for _ in range(50)])
    assert engine.client.lrange(engine.keys.wake_list(tag(engine, "mail")), 0, -1) == ["1"]
    # A fetch that read the partition to its end clears the ready flag; with no worker waiting the
    # token stays, and the next submit's ring finds it: still one token.
    engine.client.delete(engine.keys.ready(tag(engine, "mail")))
    engine.tasks.enqueue("dtq.echo", queue="mail")
    assert engine.client.lrange(engine.keys.wake_list(tag(engine, "mail")), 0, -1) == ["1"]


def test_an_idle_worker_gets_the_task_claimed_in_the_wait_that_a_submit_ends(config: DtqConfig, waits: Waits,
                                                                            long_waits: None) -> None:
    engine, cfg = make_engine(config)
    wake_list = engine.keys.wake_list(tag(engine, "mail"))

    async def scenario() -> None:
        async with running_worker(cfg, queues=["mail"]) as worker:
            await waits.blocked(worker)
            fetches = waits.fetches.get(worker.worker_id, 0)
            task_id = engine.tasks.enqueue("dtq.echo", {"n": 1}, queue="mail").id
            assert await status_once(engine, task_id, lambda s: s == "SUCCEEDED") == "SUCCEEDED"
            # Claimed by the wait's own fetch (no wait here lasts less than a minute unless a
            # token or a wake-up ends it), and the token it took is gone.
            assert waits.claimed[worker.worker_id] == [task_id]
            assert engine.client.llen(wake_list) == 0
            # And it waits on the list again for the next one.
            await waits.blocked(worker)
            second = engine.tasks.enqueue("dtq.echo", {"n": 2}, queue="mail").id
            assert await status_once(engine, second, lambda s: s == "SUCCEEDED") == "SUCCEEDED"
            assert waits.claimed[worker.worker_id] == [task_id, second]
            # The wake message each submit also published sent the worker to no second fetch:
            # it read that ring's entries already.
            await waits.blocked(worker)
            assert waits.fetches.get(worker.worker_id, 0) == fetches

    asyncio.run(scenario())


def test_a_worker_whose_peer_took_the_token_joins_through_the_token_its_fetch_passes_on(
        config: DtqConfig, waits: Waits, long_waits: None) -> None:
    engine, cfg = make_engine(config)

    async def scenario() -> None:
        async with running_worker(cfg, queues=["mail"], concurrency=2) as first, \
                running_worker(cfg, queues=["mail"], concurrency=2) as second:
            await waits.blocked(first)
            await waits.blocked(second)
            # Delayed, the 8 tasks reach the stream together, moved by the scheduler's one script:
            # one ring, one token. One worker's wait takes it and claims 2; its fetch leaves 6 and
            # passes a token on, which ends the other's wait. Without that the other would sit in
            # its minute-long wait while 0.3 s tasks queue. (Submitted one by one, each of a
            # batch's scripts could ring anew for whichever worker is waiting at that moment.)
            # (A clock held still gives the 8 the same due time: one scheduler pass moves them.)
            held = Engine(cfg, clock=FakeClock(start_ms=int(time.time() * 1000)))
            ids = [held.tasks.enqueue("dtq.sleep", {"seconds": 0.3}, queue="mail", delay_seconds=1).id
                   for _ in range(8)]
            for task_id in ids:
                assert await status_once(engine, task_id, lambda s: s == "SUCCEEDED", timeout=20) == "SUCCEEDED"
            ran_on = {engine.tasks.get(task_id)["worker_id"] for task_id in ids}
            assert ran_on == {first.worker_id, second.worker_id}

    asyncio.run(scenario())


def test_a_stop_ends_a_wait_on_the_wake_list_at_once(config: DtqConfig, waits: Waits, long_waits: None) -> None:
    engine, cfg = make_engine(config)

    async def scenario() -> float:
        worker = Worker(cfg, queues=["mail"], name="stopper")
        run = asyncio.create_task(worker.run())
        await waits.blocked(worker)
        asked = time.monotonic()
        worker.request_stop()
        await asyncio.wait_for(run, 30)
        return time.monotonic() - asked

    # Well under the drain's own bound for a consumer that does not return (1 s + 2 s).
    assert asyncio.run(scenario()) < 2.5
    # The push that ended the wait was taken by it: no key of the worker's is left behind.
    assert not engine.client.exists(engine.keys.wake_self(tag(engine, "mail"), "stopper"))


def test_a_quiet_ends_a_wait_on_the_wake_list_and_the_worker_takes_nothing_after(
        config: DtqConfig, waits: Waits, long_waits: None) -> None:
    # The fetch queued behind a wait would claim the next submit's task for a worker told to
    # take nothing more: quiet ends the wait at once, as a stop does.
    engine, cfg = make_engine(config)

    async def scenario() -> str:
        worker = Worker(cfg, queues=["mail"], name="quieted")
        run = asyncio.create_task(worker.run())
        await waits.blocked(worker)
        worker._obey("quiet")  # what its heartbeat does with an operator's word
        deadline = time.monotonic() + 2.5
        while worker.worker_id in waits.waiting:
            assert time.monotonic() < deadline, "quiet left the worker blocked on its wake list"
            await asyncio.sleep(0.01)
        later = engine.tasks.enqueue("dtq.echo", queue="mail").id
        worker.request_stop()
        await asyncio.wait_for(run, 30)
        return later

    later = asyncio.run(scenario())
    shown = engine.tasks.get(later)
    assert (shown["status"], shown["attempt"]) == ("QUEUED", 0)
    assert waits.claimed.get("quieted", []) == []


def test_a_wake_list_overwritten_by_hand_fails_no_submit_and_the_channel_serves(
        config: DtqConfig, redis_client: redis.Redis) -> None:
    engine, cfg = make_engine(config)
    wake_list = engine.keys.wake_list(tag(engine, "mail"))
    engine.client.set(wake_list, "not a list")

    async def scenario() -> None:
        async with running_worker(cfg, queues=["mail"]):
            await asyncio.sleep(0.3)  # its first idle wait fails on the key and falls back
            ids = [engine.tasks.enqueue("dtq.echo", {"n": n}, queue="mail").id for n in range(3)]
            for task_id in ids:
                assert await status_once(engine, task_id, lambda s: s == "SUCCEEDED") == "SUCCEEDED"

    asyncio.run(scenario())
    assert engine.client.get(wake_list) == "not a list"  # left as it was: a submit's ring pcalls


def test_deleting_a_queue_deletes_its_wake_list(config: DtqConfig) -> None:
    engine, cfg = make_engine(config)
    engine.tasks.enqueue("dtq.echo", queue="gone")
    wake_list = engine.keys.wake_list(tag(engine, "gone"))
    assert engine.client.exists(wake_list)
    run_burst(cfg)  # empties it: only an empty queue can be deleted
    engine.queues.delete("gone", actor=Actor(name="test", source="cli"))
    assert not engine.client.exists(wake_list)


def test_the_message_of_a_ring_a_wait_already_read_is_passed_over_once(config: DtqConfig) -> None:
    # A wait's fetch read the ring's entries before the ring's message came: that message must
    # not send the worker to fetch again; the next one (a later ring) must.
    engine, _ = make_engine(config)

    async def scenario() -> None:
        client = async_client(config, read_timeout_s=10)
        await client.ping()  # on a cluster, the slot map the subscription is routed by
        sub = WakeSubscription(client, engine.keys.wake(), "w")
        sub.start()
        try:
            sub.serve(["t"])
            while not sub.subscribed:
                await asyncio.sleep(0.01)
            sub.drained("t", sub.ticket("t"))  # the resubscribe's sweep found it drained
            assert not sub.ready
            sub.covered("t")
            engine.client.publish(engine.keys.wake(), "t")
            engine.client.publish(engine.keys.wake(), "other")  # not served: ignored
            assert not await sub.wait(0.3)
            engine.client.publish(engine.keys.wake(), "t")
            assert await sub.wait(5) and sub.ready == {"t"}
        finally:
            await sub.close()
            await client.aclose()

    asyncio.run(scenario())
