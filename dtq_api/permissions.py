"""The policy for destructive operations (cancel, pause, resume, purge, delete queue,
DLQ retry/discard, and every change to a periodic task).

The console's rules, not looser ones: a staff session needs the same named permission as the
console's button (dtq_dashboard.permissions.can_act). With no DTQ_API_KEY, nobody else gets in
unless the operator set DTQ_ALLOW_ANONYMOUS_ADMIN=true, and even then never from another site's
page: a browser sends a cross-site form POST with no custom header, so without these checks any
web page a user opens could purge a queue on a dtq reachable from that user's machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.http import HttpRequest
from rest_framework.authentication import BaseAuthentication, SessionAuthentication
from rest_framework.permissions import SAFE_METHODS, AllowAny, BasePermission
from rest_framework.request import Request
from rest_framework.response import Response

from dtq_core.conf import get_config
from dtq_dashboard.origin import origin_allowed
from dtq_dashboard.permissions import ACTION_PERMISSIONS, can_act

from .auth import (
    HEADER,
    ApiKeyAuthentication,
    ApiKeyInvalid,
    ApiKeyRequired,
    AuthenticationRequired,
    CrossSiteRequest,
    PermissionMissing,
    PresentedKey,
    configured_key,
    is_staff,
    key_matches,
)

if TYPE_CHECKING:
    from rest_framework.permissions import _PermissionClass  # an alias of DRF's stubs only


def cross_site_origin(request: HttpRequest) -> str | None:
    """The foreign origin a browser named (Origin, else Referer), or None when same-site or unnamed.

    Scripts send neither header and pass; "Origin: null" (sandboxed or file pages) is foreign.
    """
    origin = request.META.get("HTTP_ORIGIN")
    if origin is None:
        referer = request.META.get("HTTP_REFERER")
        if not referer:
            return None
        try:
            parts = urlsplit(referer)
        except ValueError:
            return referer
        origin = f"{parts.scheme}://{parts.netloc}"
    return None if origin_allowed(origin, request.get_host()) else origin


class DestructiveOperation(BasePermission):
    """Allow a matching X-API-Key; else a staff session (CSRF checked by SessionAuthentication)
    holding the view's console permission; else, only with DTQ_ALLOW_ANONYMOUS_ADMIN=true (and
    no key set), an anonymous same-site caller whose cookies, if any, come with a CSRF token."""

    def has_permission(self, request: Request, view: Any) -> bool:
        configured = configured_key()
        presented = request.auth if isinstance(request.auth, PresentedKey) else None
        if presented is not None and configured:
            if key_matches(presented.value, configured):
                return True
            raise ApiKeyInvalid("the X-API-Key header does not match DTQ_API_KEY")
        foreign = cross_site_origin(request._request)
        if foreign is not None:
            raise CrossSiteRequest(f"refused a destructive request sent from another site ({foreign[:200]}); "
                                   "nothing was changed")
        codename = view.permission
        if is_staff(request.user):
            if can_act(request.user, codename):
                return True
            raise PermissionMissing(f"this operation needs a staff account with the "
                                    f"“{ACTION_PERMISSIONS[codename]}” permission (dtq_dashboard.{codename})")
        if configured:
            raise ApiKeyRequired("this operation needs an X-API-Key header (or a logged-in staff session)")
        if not get_config().allow_anonymous_admin:
            raise AuthenticationRequired(
                "this operation needs a logged-in staff session with CSRF, or DTQ_API_KEY set on the server "
                "and sent as the X-API-Key header (DTQ_ALLOW_ANONYMOUS_ADMIN=true opens it to anyone)")
        if request._request.COOKIES:
            # A browser: its cookies say it may be a victim's, so it proves it is on our page.
            # Django's request, as DRF passes it to CSRFCheck; DRF's stubs name its own Request.
            SessionAuthentication().enforce_csrf(request._request)  # type: ignore[arg-type]
        return True


class DestructiveMixin:
    """Put on a view whose every method is destructive; `permission` names the console's permission."""

    authentication_classes: Sequence[type[BaseAuthentication]] = (ApiKeyAuthentication, SessionAuthentication)
    permission_classes: Sequence[_PermissionClass] = (DestructiveOperation,)
    permission: str = ""

    def handle_exception(self, exc: Exception) -> Response:
        response = super().handle_exception(exc)  # type: ignore[misc]
        if response.status_code == 401:  # a 401 names the scheme that would be accepted
            response["WWW-Authenticate"] = f'{HEADER} realm="dtq"'
        return response


class ChangingMethodsMixin(DestructiveMixin):
    """Put on a view that reads with GET (open, as every read is) and changes with its other
    methods (destructive); `permissions` names the console's permission per changing method."""

    permissions: dict[str, str] = {}

    @property
    def permission(self) -> str:  # type: ignore[override]  # DestructiveOperation reads it per request
        return self.permissions[self.request.method or ""]  # type: ignore[attr-defined]

    def get_permissions(self) -> list[BasePermission]:
        method = self.request.method  # type: ignore[attr-defined]
        if method in SAFE_METHODS or method not in self.permissions:  # a method with no handler: DRF's 405
            return [AllowAny()]
        return [DestructiveOperation()]
