import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "dtq_site.settings")
application = get_wsgi_application()

from dtq_site.handlers import freeze_startup_heap, refuse_public_secret_key  # noqa: E402

refuse_public_secret_key()
freeze_startup_heap()
