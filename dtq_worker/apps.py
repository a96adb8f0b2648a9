from django.apps import AppConfig


class DtqWorkerConfig(AppConfig):
    name = "dtq_worker"
    verbose_name = "dtq worker and operator commands"
