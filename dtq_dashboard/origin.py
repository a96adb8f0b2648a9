"""Refuse WebSocket handshakes that a browser makes from another site.

A page on another site can open a WebSocket to /ws/events, and the browser sends the console's
session cookie with it (cross-site WebSocket hijacking): with DTQ_CONSOLE_LOGIN_REQUIRED, that
page would read the live feed as the logged-in user. Browsers always send Origin on a
WebSocket handshake, so the rule is Django's CSRF origin check: the Origin must be the host the
request came to (and that host one of DJANGO_ALLOWED_HOSTS, as for every HTTP request, which
also stops DNS rebinding), or one of DJANGO_CSRF_TRUSTED_ORIGINS (wildcards as Django reads
them). A client that sends no Origin (a script, wscat) is not a browser, carries no one else's
cookie, and passes.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import split_domain_port, validate_host
from django.utils.http import is_same_domain


def _allowed_hosts() -> list[str]:
    # As HttpRequest.get_host: with DEBUG and no ALLOWED_HOSTS, the local names only.
    if settings.DEBUG and not settings.ALLOWED_HOSTS:
        return [".localhost", "127.0.0.1", "[::1]"]
    return list(settings.ALLOWED_HOSTS)


def origin_allowed(origin: str | None, host: str | None) -> bool:
    if origin is None:
        return True
    try:
        parts = urlsplit(origin)
    except ValueError:  # "http://[::1" and the like
        return False
    if parts.scheme in ("http", "https") and host and parts.netloc.lower() == host.lower():
        domain, _ = split_domain_port(host)
        if domain and validate_host(domain, _allowed_hosts()):
            return True
    trusted = settings.CSRF_TRUSTED_ORIGINS
    if origin in trusted:
        return True
    return any(is_same_domain(parts.netloc, urlsplit(t).netloc.lstrip("*"))
               for t in trusted if "*" in t and urlsplit(t).scheme == parts.scheme)


class SameOriginWebSocket:
    def __init__(self, application: Any) -> None:
        self.application = application

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        origins = [v.decode("latin1") for k, v in scope.get("headers", []) if k == b"origin"]
        hosts = [v.decode("latin1") for k, v in scope.get("headers", []) if k == b"host"]
        if len(origins) > 1 or len(hosts) > 1 or not origin_allowed(origins[0] if origins else None,
                                                                    hosts[0] if hosts else None):
            return await WebsocketDenier()(scope, receive, send)
        return await self.application(scope, receive, send)
