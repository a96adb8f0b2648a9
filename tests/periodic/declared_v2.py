"""The next deploy of declared_v1: the same handler, its schedule removed from code."""

from __future__ import annotations

from typing import Any

import dtq_tasks


@dtq_tasks.task("periodic.declared")
async def declared(payload: Any) -> Any:
    return payload
