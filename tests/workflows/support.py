"""Shared pieces of the workflow tests: worker settings and reads of the handlers' log."""

from __future__ import annotations

import json
from typing import Any

import redis

from dtq_core.keys import Keys

from ..failure.support import FAST

ENV: dict[str, Any] = {**FAST, "DTQ_TASK_MODULES": "tests.workflows.handlers"}


def env(**overrides: Any) -> dict[str, Any]:
    return {**ENV, **overrides}


def log(client: redis.Redis, keys: Keys, kind: str) -> list[dict[str, Any]]:
    return [json.loads(x) for x in client.lrange(f"{keys.prefix}:testlog:{kind}", 0, -1)]


def execs(client: redis.Redis, keys: Keys, task_id: str) -> int:
    return int(client.hget(f"{keys.prefix}:testlog:execs", task_id) or 0)


def flag(client: redis.Redis, keys: Keys, name: str) -> None:
    client.set(f"{keys.prefix}:testlog:{name}", "1")


def ttls(client: redis.Redis, keys: Keys, workflow_id: str) -> dict[str, int]:
    """Each key of the workflow -> its PTTL (-1: none)."""
    return {k: client.pttl(k) for k in client.scan_iter(match=keys.workflow(workflow_id) + "*", count=1000)}


def outbox_empty(client: redis.Redis, keys: Keys, steps: list[dict[str, Any]]) -> bool:
    """Whether every ended step's outbox entry was settled (its advance done) in the steps' partitions."""
    return all(client.hlen(keys.wf_outbox(tag)) == 0 for tag in {s["task_id"].split("-")[0] for s in steps})
