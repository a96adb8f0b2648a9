"""System checks: say loudly at start when destructive operations are open to anyone, and flag a
SECRET_KEY that everyone knows (`check --deploy`)."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Warning

from dtq_core.conf import get_config

OPEN_DESTRUCTIVE = "dtq.W001"
PUBLIC_SECRET_KEY = "dtq.E002"
NO_REQUEST_ID_MIDDLEWARE = "dtq.W801"
REQUEST_ID_MIDDLEWARE = "dtq_api.middleware.RequestIdMiddleware"

# dtq_site's default DJANGO_SECRET_KEY, and the placeholder docker-compose.yml used to default to:
# both are in this public repository, so anyone can forge sessions and CSRF tokens signed with them.
DEVELOPMENT_SECRET_KEY = "dtq-insecure-development-key-change-me-in-production"
PUBLIC_SECRET_KEYS = frozenset({DEVELOPMENT_SECRET_KEY, "change-me-in-production-with-a-long-random-value"})
SECRET_KEY_HINT = ("set DJANGO_SECRET_KEY to a long random value (python3 -c 'import secrets; "
                   "print(secrets.token_hex(32))'), or DJANGO_DEBUG=true for local development")


def public_secret_key(key: str) -> bool:
    return not key.strip() or key in PUBLIC_SECRET_KEYS


def secret_key_is_public(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """`check --deploy`: Django's own W009 passes the built-in key (long, varied), so say it here."""
    if not public_secret_key(str(getattr(settings, "SECRET_KEY", ""))):
        return []
    return [Error("DJANGO_SECRET_KEY is not set: SECRET_KEY is dtq's published development key, so anyone "
                  "can forge session cookies (log in as any user) and CSRF tokens.",
                  hint=SECRET_KEY_HINT.replace(", or DJANGO_DEBUG=true for local development", ""),
                  id=PUBLIC_SECRET_KEY)]


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


def request_id_middleware_missing(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """The API works without it (ids are made per request), but answers carry no X-Request-ID."""
    if REQUEST_ID_MIDDLEWARE in (getattr(settings, "MIDDLEWARE", None) or ()):
        return []
    return [Warning(
        "dtq_api.middleware.RequestIdMiddleware is not in MIDDLEWARE: API and console responses carry no "
        "X-Request-ID header, and a client's X-Request-ID is not used in errors and the audit log.",
        hint=f'Add "{REQUEST_ID_MIDDLEWARE}" as the first entry of MIDDLEWARE.',
        id=NO_REQUEST_ID_MIDDLEWARE,
    )]
