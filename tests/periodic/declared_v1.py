"""A deploy's task module that declares a periodic schedule beside its handler
(DTQ_TASK_MODULES=tests.periodic.declared_v1)."""

from __future__ import annotations

from typing import Any

import dtq_tasks


@dtq_tasks.periodic("periodic.declared", every_seconds=1, payload={"from": "code"}, queue="declared")
async def declared(payload: Any) -> Any:
    return payload
