"""Handlers of the user project, listed in DTQ_TASK_MODULES."""

import dtq_tasks


@dtq_tasks.task("userproject.add")
def add(payload: dict[str, int]) -> int:
    return payload["a"] + payload["b"]
