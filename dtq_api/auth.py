"""Who is calling a destructive endpoint: an X-API-Key holder, a staff session or nobody.

Authentication only records what was presented; `permissions.DestructiveOperation` decides,
so reads and submit never fail because of a stale key header.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import AnonymousUser
from rest_framework.authentication import BaseAuthentication
from rest_framework.request import Request

from dtq_core.conf import get_config
from dtq_core.engine.audit import Actor
from dtq_core.errors import DtqError

from .middleware import request_id_of

HEADER = "X-API-Key"


class ApiKeyRequired(DtqError):
    code = "API_KEY_REQUIRED"
    http_status = 401


class ApiKeyInvalid(DtqError):
    code = "API_KEY_INVALID"
    http_status = 403


class AuthenticationRequired(DtqError):
    """No key is configured and anonymous destructive calls are off (DTQ_ALLOW_ANONYMOUS_ADMIN)."""

    code = "AUTHENTICATION_REQUIRED"
    http_status = 401


class PermissionMissing(DtqError):
    """A staff session without the named permission the console would also require."""

    code = "PERMISSION_DENIED"
    http_status = 403


class CrossSiteRequest(DtqError):
    """A browser sent this from another site's page (foreign Origin or Referer)."""

    code = "CROSS_SITE_REQUEST"
    http_status = 403


@dataclass(frozen=True, slots=True)
class PresentedKey:
    """The X-API-Key header as sent; `repr` never shows it so it cannot leak into logs."""

    value: str

    def __repr__(self) -> str:
        return "PresentedKey(<hidden>)"


class ApiKeyAuthentication(BaseAuthentication):
    """Record an X-API-Key header as request.auth; a present header wins over the session."""

    def authenticate(self, request: Request) -> tuple[Any, PresentedKey] | None:
        given = request.META.get("HTTP_X_API_KEY")
        if given is None:
            return None
        return AnonymousUser(), PresentedKey(given)

    def authenticate_header(self, request: Request) -> str:
        return HEADER


def configured_key() -> str:
    return get_config().api_key


def key_matches(given: str, configured: str) -> bool:
    """Compare in constant time (hmac.compare_digest) so the key cannot be guessed by timing.

    given is the header as Django has it: WSGI and ASGI servers decode header bytes as latin-1
    (PEP 3333), so encoding it back as latin-1 gives the bytes the client sent, which for the
    right key are the configured key's UTF-8 (what curl and requests send)."""
    try:
        sent = given.encode("latin-1")
    except UnicodeEncodeError:  # no server hands over such a str: it cannot be the key's bytes
        return False
    return hmac.compare_digest(sent, configured.encode("utf-8"))


def is_staff(user: Any) -> bool:
    """A session that counts for destructive calls: active staff, or an active superuser."""
    return bool(user is not None and user.is_authenticated and user.is_active
                and (user.is_staff or user.is_superuser))


def actor_for(request: Request) -> Actor:
    """Name the caller for the audit stream; the raw key is never stored, only its sha256 prefix."""
    request_id = request_id_of(request._request)
    configured = configured_key()
    if configured and isinstance(request.auth, PresentedKey) and key_matches(request.auth.value, configured):
        return Actor.api_key(configured, request_id=request_id)
    if is_staff(request.user):
        return Actor.user(request.user.get_username(), source="api", request_id=request_id)
    return Actor.anonymous_api(request_id=request_id)
