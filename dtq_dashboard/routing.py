"""WebSocket routes: the live event feed at /ws/events."""

from __future__ import annotations

from django.urls import path

from .consumers import EventsConsumer

websocket_urlpatterns = [
    path("ws/events", EventsConsumer.as_asgi()),
]
