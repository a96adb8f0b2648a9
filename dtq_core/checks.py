"""System checks on the engine's configuration that are legal but surprising."""

from __future__ import annotations

from typing import Any

import redis
from django.core.checks import CheckMessage, Warning

from .conf import get_config
from .config import ConfigError
from .connection import UNAVAILABLE_ERRORS, eviction_policy, eviction_problem, sync_client

KEYS_OUTLIVE_RECORDS = "dtq.W002"
EVICTING_POLICY = "dtq.W010"
POLICY_UNVERIFIED = "dtq.W011"

# A tuple of its own: mypy does not follow a starred tuple in an except clause.
_REDIS_FAILURES: tuple[type[BaseException], ...] = (*UNAVAILABLE_ERRORS, redis.RedisError)


def idempotency_keys_outlive_records(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when an idempotency key can outlive the task record it stands for."""
    try:
        config = get_config()
    except ConfigError:
        return []  # reported where the configuration is read
    if config.task_retention_s >= config.idem_ttl_s:
        return []
    return [Warning(
        f"DTQ_TASK_RETENTION_S ({config.task_retention_s}) is shorter than DTQ_IDEM_TTL_S "
        f"({config.idem_ttl_s}): a resubmit with a key whose task record has expired gets only the "
        "first task's id (status UNKNOWN), and the task's outcome is no longer readable.",
        hint="Keep DTQ_TASK_RETENTION_S at least as long as DTQ_IDEM_TTL_S.",
        id=KEYS_OUTLIVE_RECORDS,
    )]


def redis_eviction_policy(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Redis's maxmemory-policy must be noeviction (docs/deployment.md).

    A deploy check (`manage.py check --deploy`): it connects to Redis, which migrate,
    createsuperuser and the like must not need. Workers check at start, /ready on every probe.
    """
    try:
        config = get_config()
    except ConfigError:
        return []  # reported where the configuration is read
    client = sync_client(config)
    try:
        policy = eviction_policy(client)
    except _REDIS_FAILURES as exc:
        return [Warning(f"could not verify Redis's maxmemory-policy: {type(exc).__name__}: {exc}",
                        hint="Run the check where DTQ_REDIS_URL is reachable.", id=POLICY_UNVERIFIED)]
    finally:
        client.close()
    problem = eviction_problem(policy)
    if problem is None:
        return []
    hint = ("In redis.conf: maxmemory-policy noeviction (or CONFIG SET maxmemory-policy noeviction); on a "
            "managed Redis, choose noeviction in its parameter settings.")
    return [Warning(problem, hint=hint, id=EVICTING_POLICY if policy else POLICY_UNVERIFIED)]
