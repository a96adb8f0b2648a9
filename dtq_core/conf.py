"""settings.DTQ (or the DTQ_* environment) -> DtqConfig; the only dtq_core module that imports
django.conf and the only one that reads the environment.

Reloaded on setting_changed so pytest-django's `settings` fixture works.
"""

from __future__ import annotations

import sys

import environ
from django.conf import settings

from .config import ConfigError, DtqConfig, read_env

_config: DtqConfig | None = None


def read_environment() -> DtqConfig:
    """Read and validate every DTQ_* variable; raises ConfigError naming the first bad one."""
    env = environ.Env()
    try:
        return read_env(lambda name: env.str(name, default=None))
    except environ.ImproperlyConfigured as exc:  # "$OTHER" pointing at a variable that is not set
        raise ConfigError(str(exc)) from None


def get_config() -> DtqConfig:
    global _config
    if _config is None:
        # A project of its own has no settings.DTQ (only dtq_site builds one): the DTQ_*
        # variables must still apply there, read exactly as dtq_site reads them.
        _config = DtqConfig.from_mapping(settings.DTQ) if hasattr(settings, "DTQ") else read_environment()
    return _config


def stop_if_invalid() -> None:
    """Exit with one line naming the variable when the DTQ_* environment is invalid (CONTRACT 3).

    dtq_site does this while its settings load; a project without settings.DTQ gets it when its
    apps load, before any command or server starts.
    """
    if hasattr(settings, "DTQ"):
        return  # validated where it was built (dtq_site), or reported by check dtq.E701 if by hand
    try:
        get_config()
    except ConfigError as exc:
        sys.stderr.write(f"dtq: invalid configuration: {exc}\n")
        raise SystemExit(2) from None


def _reload(*, setting: str, **_: object) -> None:
    global _config
    if setting == "DTQ":
        _config = None  # get_engine() sees the new config and builds a new Engine


def connect_signals() -> None:
    from django.test.signals import setting_changed  # here: importing django.test loads its test client

    setting_changed.connect(_reload, dispatch_uid="dtq_core.conf.reload")
