"""settings.DTQ (or the DTQ_* environment) -> DtqConfig and the process-wide Engine built from it;
the only dtq_core module that imports django.conf and the only one that reads the environment.

Reloaded on setting_changed so pytest-django's `settings` fixture works.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import environ
from django.conf import settings

from .config import ConfigError, DtqConfig, read_env
from .engine import Engine
from .engine.limits import validate as validate_limits
from .engine.periodic import PeriodicSpec
from .errors import ValidationError
from .periodic_declared import declared
from .task import valid_queue_name

_config: DtqConfig | None = None
_engine: Engine | None = None
_lock = threading.RLock()


def read_environment() -> DtqConfig:
    """Read and validate every DTQ_* variable; raises ConfigError naming the first bad one."""
    env = environ.Env()
    try:
        config = read_env(lambda name: env.str(name, default=None))
    except environ.ImproperlyConfigured as exc:  # "$OTHER" pointing at a variable that is not set
        raise ConfigError(str(exc)) from None
    return config


def get_config() -> DtqConfig:
    global _config
    if _config is not None:
        return _config
    with _lock:
        return _read_config()


def _read_config() -> DtqConfig:
    global _config
    if _config is None:
        # A project of its own has no settings.DTQ (only dtq_site builds one): the DTQ_*
        # variables must still apply there, read exactly as dtq_site reads them.
        _config = DtqConfig.from_mapping(settings.DTQ) if hasattr(settings, "DTQ") else read_environment()
    return _config


def get_engine() -> Engine:
    """The process-wide Engine built from settings.DTQ; rebuilt when the settings change."""
    global _engine
    engine = _engine
    if engine is not None and engine.config is _config:
        return engine
    # Built once under a lock: handler threads asking at once must share one engine (a second one,
    # dropped at once, would close its connections under the thread still using them).
    with _lock:
        config = _read_config()  # a new DtqConfig after conf reloads settings.DTQ
        if _engine is None or _engine.config is not config:
            _engine = Engine(config)
        return _engine


def declared_periodic() -> list[Any]:
    """The periodic schedules declared in code: @dtq_tasks.periodic's (the task modules must be
    imported first) and settings.DTQ_PERIODIC's (a list of dicts with the API's body fields),
    each a PeriodicSpec with source="code". ConfigError naming a bad DTQ_PERIODIC entry or a name
    declared twice."""
    specs = {spec.name: spec for spec in declared()}
    entries = getattr(settings, "DTQ_PERIODIC", None) or []
    if not isinstance(entries, list | tuple):
        raise ConfigError("DTQ_PERIODIC must be a list of periodic schedules (dicts)")
    for i, entry in enumerate(entries):
        try:
            spec = PeriodicSpec.from_dict(entry, source="code")
        except ValidationError as exc:
            raise ConfigError(f"DTQ_PERIODIC[{i}]: {exc.message}") from None
        if spec.name in specs:
            raise ConfigError(f"DTQ_PERIODIC[{i}]: periodic schedule {spec.name!r} is declared twice")
        specs[spec.name] = spec
    return [specs[name] for name in sorted(specs)]


def declared_queue_limits() -> dict[str, dict[str, Any]] | None:
    """settings.DTQ_QUEUE_LIMITS ({queue: limits}, validated as engine.limits.set validates them),
    or None when the setting is absent (then nothing is synced). ConfigError naming a bad entry."""

    raw = getattr(settings, "DTQ_QUEUE_LIMITS", None)
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ConfigError("DTQ_QUEUE_LIMITS must be a dict of queue name -> limits")
    out: dict[str, dict[str, Any]] = {}
    for queue, spec in raw.items():
        if not isinstance(queue, str) or not valid_queue_name(queue):
            raise ConfigError(f"DTQ_QUEUE_LIMITS: {queue!r} is not a queue name")
        try:
            out[queue] = validate_limits(spec)
        except ValidationError as exc:
            raise ConfigError(f"DTQ_QUEUE_LIMITS[{queue!r}]: {exc.message}") from None
    return out


def reset_engine() -> None:
    global _engine
    _engine = None


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
