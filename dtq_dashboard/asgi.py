"""The console's live feed in a project's asgi.py, in one line:

    from dtq_dashboard.asgi import websocket_application
    application = websocket_application(get_asgi_application())

Importable before Django is set up: everything that needs settings is imported inside the call.
"""

from __future__ import annotations

from typing import Any


def websocket_application(http_application: Any) -> Any:
    """HTTP to `http_application`; WebSockets to the console's feed, behind the origin, login and
    send-backpressure guards dtq's own site uses. Call after get_asgi_application() (setup)."""
    from channels.auth import AuthMiddlewareStack
    from channels.routing import ProtocolTypeRouter, URLRouter

    from .backpressure import SendBackpressure
    from .origin import SameOriginWebSocket
    from .routing import console_websocket_urlpatterns

    return ProtocolTypeRouter({
        "http": http_application,
        # SendBackpressure first: it must see the server's own `send`, before any middleware wraps it.
        "websocket": SendBackpressure(SameOriginWebSocket(AuthMiddlewareStack(URLRouter(
            console_websocket_urlpatterns())))),
    })
