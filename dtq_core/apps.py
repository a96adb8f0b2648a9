from django.apps import AppConfig


class DtqCoreConfig(AppConfig):
    name = "dtq_core"
    verbose_name = "dtq engine"

    def ready(self) -> None:
        from .conf import connect_signals, stop_if_invalid

        connect_signals()
        stop_if_invalid()
