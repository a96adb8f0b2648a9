"""ASGI entry point: HTTP through Django, WebSockets through Channels (daphne serves both)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

from dtq_site.handlers import get_sync_chain_asgi_application

django_asgi_app = get_sync_chain_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402

from dtq_dashboard.backpressure import SendBackpressure  # noqa: E402
from dtq_dashboard.origin import SameOriginWebSocket  # noqa: E402
from dtq_dashboard.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # SendBackpressure first: it must see daphne's own `send`, before any middleware wraps it.
        "websocket": SendBackpressure(SameOriginWebSocket(AuthMiddlewareStack(URLRouter(websocket_urlpatterns)))),
    }
)
