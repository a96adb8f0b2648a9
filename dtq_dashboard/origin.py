"""Refuse WebSocket handshakes that a browser makes from another site.

A page on another site can open a WebSocket to /ws/events, and the browser sends the console's
session cookie with it (cross-site WebSocket hijacking): with DTQ_CONSOLE_LOGIN_REQUIRED, that
page would read the live feed as the logged-in user. Browsers always send Origin on a
WebSocket handshake, so the rule is Django's CSRF origin check: the Origin must be the host the
request came to, or one of DJANGO_CSRF_TRUSTED_ORIGINS. A client that sends no Origin (a script,
wscat) is not a browser, carries no one else's cookie, and passes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings


def origin_allowed(origin: str | None, host: str | None) -> bool:
    if origin is None:
        return True
    parts = urlsplit(origin)
    if host and parts.netloc and parts.netloc.lower() == host.lower():
        return True
    trusted = {o.rstrip("/").lower() for o in settings.CSRF_TRUSTED_ORIGINS}
    return origin.rstrip("/").lower() in trusted


class SameOriginWebSocket:
    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        headers = {name: value.decode("latin1") for name, value in scope.get("headers", [])}
        if not origin_allowed(headers.get(b"origin"), headers.get(b"host")):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
