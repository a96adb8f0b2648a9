"""Who may read the console and who may act: one policy for pages, actions, /ws/events and the
REST API's destructive endpoints (dtq_api.permissions).

No model import here: dtq_api uses this in projects that do not install dtq_dashboard.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings

# codename -> what it allows; assign these to groups to make read-only staff and operators.
ACTION_PERMISSIONS: dict[str, str] = {
    "retry_deadletter": "Can retry dead letters",
    "discard_deadletter": "Can discard dead letters",
    "pause_queue": "Can pause and resume queues",
    "purge_queue": "Can purge queues",
    "cancel_task": "Can cancel tasks",
    "operate_periodic": "Can pause, resume and trigger periodic tasks",
    "change_periodic": "Can create, change and delete periodic tasks",
    "change_queue_limits": "Can change queue limits",
    "enqueue_task": "Can enqueue tasks from the console",
    "control_worker": "Can quiet and stop workers",
}


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
