"""Who may read the console and who may act: one policy for pages, actions and /ws/events."""

from __future__ import annotations

from typing import Any

from django.conf import settings

from .models import ACTION_PERMISSIONS


def login_required_to_read() -> bool:
    return bool(getattr(settings, "DTQ_CONSOLE_LOGIN_REQUIRED", False))


def can_view_console(user: Any) -> bool:
    """Reading is open unless DTQ_CONSOLE_LOGIN_REQUIRED=true, then any active logged-in user reads."""
    if not login_required_to_read():
        return True
    return bool(user is not None and user.is_authenticated and user.is_active)


def can_act(user: Any, codename: str) -> bool:
    """Destructive actions need an active staff user with the named permission (superusers have all)."""
    if codename not in ACTION_PERMISSIONS:
        raise ValueError(f"unknown console permission {codename!r}")
    if user is None or not user.is_authenticated or not user.is_active:
        return False
    if user.is_superuser:
        return True
    return bool(user.is_staff and user.has_perm(f"dtq_dashboard.{codename}"))


def allowed_actions(user: Any) -> dict[str, bool]:
    """The permission map templates use to show only the buttons a user may press."""
    return {codename: can_act(user, codename) for codename in ACTION_PERMISSIONS}
