from __future__ import annotations

from django.apps import AppConfig
from django.core import checks


class DtqApiConfig(AppConfig):
    name = "dtq_api"
    verbose_name = "dtq REST API"

    def ready(self) -> None:
        from .checks import destructive_operations_open, request_id_middleware_missing, secret_key_is_public

        checks.register(destructive_operations_open, checks.Tags.security, "dtq")
        checks.register(secret_key_is_public, checks.Tags.security, deploy=True)
        checks.register(request_id_middleware_missing, "dtq")
        # The OpenAPI extension is registered from urls.py: workers never load the URLconf, so
        # they skip drf-spectacular's import cost (~40 MB of RSS).
