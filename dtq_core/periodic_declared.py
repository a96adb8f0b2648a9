"""Periodic schedules declared in code (@dtq_tasks.periodic), by name, as the task modules'
imports declare them; a worker syncs them, with settings.DTQ_PERIODIC's, at start
(engine.periodic.sync_declared). Like registry.py for handlers: a process-wide table, no Redis."""

from __future__ import annotations

from .engine.periodic import PeriodicSpec

_DECLARED: dict[str, PeriodicSpec] = {}


def declare(spec: PeriodicSpec) -> PeriodicSpec:
    """Add a declared schedule; ValueError when the name is declared already with another spec
    (a module imported twice under two names declares the same spec twice: that is fine)."""
    existing = _DECLARED.get(spec.name)
    if existing is not None and existing != spec:
        raise ValueError(f"periodic schedule {spec.name!r} is already declared with another schedule")
    _DECLARED[spec.name] = spec
    return spec


def declared() -> list[PeriodicSpec]:
    return [_DECLARED[name] for name in sorted(_DECLARED)]


def forget(name: str) -> None:
    """Drop a declaration (tests)."""
    _DECLARED.pop(name, None)
