"""WebSocket routes: the live event feed at /ws/events; any other path is refused."""

from __future__ import annotations

from django.urls import path, re_path

from .consumers import EventsConsumer, NoRouteConsumer

websocket_urlpatterns = [
    path("ws/events", EventsConsumer.as_asgi()),
    re_path(r"", NoRouteConsumer.as_asgi()),  # last: every other path
]
