"""Stopping the worker's loops at a drain, on a real asyncio loop."""

from __future__ import annotations

import asyncio

from dtq_core.worker.runtime import cancel_and_wait


def test_a_loop_that_swallows_a_cancel_is_stopped_all_the_same() -> None:
    # Python 3.11's asyncio.wait_for (under redis-py's socket writes, e.g. a heartbeat's) returns
    # its result instead of raising when the cancel lands just as what it waits for completes.
    # The heartbeat loop then carried on, and a drain waiting for it never ended: the worker
    # process hung after SIGTERM.
    async def scenario() -> bool:
        write_done: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        async def heartbeat_loop() -> None:
            nonlocal write_done
            while True:
                await asyncio.wait_for(write_done, 10)  # as redis-py's send_packed_command
                write_done = asyncio.get_running_loop().create_future()
                asyncio.get_running_loop().call_later(0.05, write_done.set_result, None)

        loop_task = asyncio.create_task(heartbeat_loop())
        await asyncio.sleep(0)  # it waits for its write
        write_done.set_result(None)  # the write completes, and in the same tick the drain cancels
        await asyncio.wait_for(cancel_and_wait([loop_task]), 5)  # (it never ended with one cancel)
        return loop_task.cancelled()

    assert asyncio.run(scenario())
