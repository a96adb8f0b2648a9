"""The console's named permissions; no table, only Meta.permissions (queue state lives in Redis)."""

from __future__ import annotations

from django.db import models

from .permissions import ACTION_PERMISSIONS


class ConsolePermission(models.Model):
    """An unmanaged model that exists so Django creates the console's permissions."""

    class Meta:
        managed = False
        default_permissions = ()
        permissions = list(ACTION_PERMISSIONS.items())
