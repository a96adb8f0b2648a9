"""The policy for destructive operations (cancel, pause, resume, purge, DLQ retry/discard)."""

from __future__ import annotations

from typing import Any

from rest_framework.authentication import SessionAuthentication
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from .auth import (
    HEADER,
    ApiKeyAuthentication,
    ApiKeyInvalid,
    ApiKeyRequired,
    PresentedKey,
    configured_key,
    is_staff,
    key_matches,
)


class DestructiveOperation(BasePermission):
    """Allow a matching X-API-Key, a staff session (CSRF checked by SessionAuthentication), or
    anyone when DTQ_API_KEY is empty (the documented open default, flagged by a system check)."""

    def has_permission(self, request: Request, view: Any) -> bool:
        configured = configured_key()
        presented = request.auth if isinstance(request.auth, PresentedKey) else None
        if presented is not None and configured:
            if key_matches(presented.value, configured):
                return True
            raise ApiKeyInvalid("the X-API-Key header does not match DTQ_API_KEY")
        if is_staff(request.user) or not configured:
            return True
        raise ApiKeyRequired("this operation needs an X-API-Key header (or a logged-in staff session)")


class DestructiveMixin:
    """Put on a view whose every method is destructive."""

    authentication_classes = (ApiKeyAuthentication, SessionAuthentication)
    permission_classes = (DestructiveOperation,)

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)  # type: ignore[misc]
        if response.status_code == 401:  # a 401 names the scheme that would be accepted
            response["WWW-Authenticate"] = f'{HEADER} realm="dtq"'
        return response
