"""System checks: say loudly at start when destructive operations are open to anyone."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Warning

from dtq_core.conf import get_config

OPEN_DESTRUCTIVE = "dtq.W001"


def destructive_operations_open(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when DEBUG is off and DTQ_API_KEY is empty: cancel, purge, pause and DLQ actions are open."""
    if settings.DEBUG or get_config().api_key:
        return []
    return [Warning(
        "DTQ_API_KEY is empty and DEBUG is off: anyone who can reach the API can cancel tasks, "
        "pause, resume and purge queues, and retry or discard dead letters.",
        hint="Set DTQ_API_KEY to a long random value (e.g. `python -c 'import secrets; "
             "print(secrets.token_hex(32))'`) and send it as the X-API-Key header.",
        id=OPEN_DESTRUCTIVE,
    )]
