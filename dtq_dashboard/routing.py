"""WebSocket routes (the live event feed)."""

websocket_urlpatterns: list = []
