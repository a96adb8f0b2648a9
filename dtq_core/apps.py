from django.apps import AppConfig
from django.core import checks

from .checks import idempotency_keys_outlive_records, redis_eviction_policy
from .conf import connect_signals, stop_if_invalid


class DtqCoreConfig(AppConfig):
    name = "dtq_core"
    verbose_name = "dtq engine"

    def ready(self) -> None:
        connect_signals()
        stop_if_invalid()
        checks.register(idempotency_keys_outlive_records, "dtq")
        checks.register(redis_eviction_policy, "dtq", deploy=True)
