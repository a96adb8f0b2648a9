from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class DtqApiConfig(AppConfig):
    name = "dtq_api"
    verbose_name = "dtq REST API"

    def ready(self) -> None:
        from .checks import destructive_operations_open

        checks.register(destructive_operations_open, checks.Tags.security, "dtq")
        # The OpenAPI extension is registered from urls.py: workers never load the URLconf, so
        # they skip drf-spectacular's import cost (~40 MB of RSS).
