from django.apps import AppConfig


class DtqCoreConfig(AppConfig):
    name = "dtq_core"
    verbose_name = "dtq engine"

    def ready(self) -> None:
        from .conf import connect_signals

        connect_signals()
