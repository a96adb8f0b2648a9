"""The console's named permissions; no table, only Meta.permissions (queue state lives in Redis)."""

from __future__ import annotations

from django.db import models

# codename -> what it allows; assign these to groups to make read-only staff and operators.
ACTION_PERMISSIONS: dict[str, str] = {
    "retry_deadletter": "Can retry dead letters",
    "discard_deadletter": "Can discard dead letters",
    "pause_queue": "Can pause and resume queues",
    "purge_queue": "Can purge queues",
    "cancel_task": "Can cancel tasks",
}


class ConsolePermission(models.Model):
    """An unmanaged model that exists so Django creates the console's permissions."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = list(ACTION_PERMISSIONS.items())
