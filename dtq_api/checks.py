"""System checks: say loudly at start when destructive operations are open to anyone."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage, Warning

from dtq_core.conf import get_config

OPEN_DESTRUCTIVE = "dtq.W001"


def destructive_operations_open(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn whenever DTQ_ALLOW_ANONYMOUS_ADMIN is on: cancel, purge, pause and DLQ actions are open.

    DEBUG does not silence it: the operator turned it on, and this is the reminder that it is on.
    """
    if not get_config().allow_anonymous_admin:
        return []
    return [Warning(
        "DTQ_ALLOW_ANONYMOUS_ADMIN is on: anyone who can reach the API (from a script, not another "
        "site's page) can cancel tasks, pause, resume and purge queues, and retry or discard dead letters.",
        hint="Unset it and set DTQ_API_KEY to a long random value (e.g. `python -c 'import secrets; "
             "print(secrets.token_hex(32))'`), sent as the X-API-Key header; or use a staff session.",
        id=OPEN_DESTRUCTIVE,
    )]
