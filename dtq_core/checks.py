"""System checks on the engine's configuration that are legal but surprising."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Warning

from .conf import get_config
from .config import ConfigError

KEYS_OUTLIVE_RECORDS = "dtq.W002"


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
