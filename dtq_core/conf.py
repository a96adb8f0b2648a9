"""settings.DTQ -> DtqConfig; the only dtq_core module that imports django.conf.

Reloaded on setting_changed so pytest-django's `settings` fixture works.
"""

from __future__ import annotations

from .config import DtqConfig

_config: DtqConfig | None = None


def get_config() -> DtqConfig:
    global _config
    if _config is None:
        from django.conf import settings

        _config = DtqConfig.from_mapping(getattr(settings, "DTQ", {}))
    return _config


def _reload(*, setting: str, **_: object) -> None:
    global _config
    if setting == "DTQ":
        from .engine import reset_engine

        _config = None
        reset_engine()


def connect_signals() -> None:
    from django.test.signals import setting_changed

    setting_changed.connect(_reload, dispatch_uid="dtq_core.conf.reload")
