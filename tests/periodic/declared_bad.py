"""A task module whose declared schedule fires into a queue name submit refuses: the worker
must refuse to start, naming it (tests/periodic/test_declared.py)."""

from __future__ import annotations

from typing import Any

import dtq_tasks


@dtq_tasks.periodic("periodic.bad-queue", every_seconds=60, queue="Not A Queue")
async def bad(payload: Any) -> Any:
    return payload
