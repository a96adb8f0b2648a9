"""ASGI entry point: HTTP through Django, WebSockets through Channels (daphne serves both)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")

from dtq_site.handlers import freeze_startup_heap, get_sync_chain_asgi_application

django_asgi_app = get_sync_chain_asgi_application()

from dtq_dashboard.asgi import websocket_application  # noqa: E402

# The same one line a user's project adds (docs/install.md): the console is at /, its feed at /ws/events.
application = websocket_application(django_asgi_app)
freeze_startup_heap()  # last: everything the process imports at start is in
