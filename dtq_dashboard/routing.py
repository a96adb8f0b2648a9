"""WebSocket routes: the live event feed at <console prefix>ws/events; any other path is refused."""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.urls import NoReverseMatch, path, re_path, reverse

from .consumers import EventsConsumer, NoRouteConsumer

EVENTS = "ws/events"

# The console mounted at the root (dtq's own site): /ws/events.
websocket_urlpatterns = [
    path(EVENTS, EventsConsumer.as_asgi()),
    re_path(r"", NoRouteConsumer.as_asgi()),  # last: every other path
]


def console_events_path() -> str:
    """The feed's path: beside the console's pages, wherever the project include()s them."""
    return reverse("dtq_dashboard:overview") + EVENTS


def console_websocket_urlpatterns() -> list:
    """The routes for where the console is mounted now (needs the URLconf: call after setup)."""
    try:
        events = console_events_path()
    except NoReverseMatch:
        raise ImproperlyConfigured("the console's live feed needs the console's URLs: add "
                                   'path("<prefix>/", include("dtq_dashboard.urls")) to ROOT_URLCONF') from None
    return [
        path(events.lstrip("/"), EventsConsumer.as_asgi()),
        re_path(r"", NoRouteConsumer.as_asgi()),
    ]
