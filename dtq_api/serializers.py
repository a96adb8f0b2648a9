"""Input serializers (output is the engine's task view: Redis records are not models)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

SUBMIT_FIELDS = ("type", "payload", "queue", "priority", "delay_seconds", "ttl_seconds", "max_attempts",
                 "timeout_seconds", "idempotency_key")


class SubmitSerializer(serializers.Serializer):
    """Shape checks only; the engine's validator owns the rules so every surface agrees."""

    type = serializers.JSONField()
    payload = serializers.JSONField(required=False, default=dict)
    queue = serializers.JSONField(required=False, default="default")
    priority = serializers.JSONField(required=False, default="normal")
    delay_seconds = serializers.JSONField(required=False, default=0)
    ttl_seconds = serializers.JSONField(required=False, default=None)
    max_attempts = serializers.JSONField(required=False, default=None)
    timeout_seconds = serializers.JSONField(required=False, default=None)
    idempotency_key = serializers.JSONField(required=False, default=None)

    def to_internal_value(self, data: Any) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": ["expected a JSON object"]})
        unknown = sorted(set(data) - set(SUBMIT_FIELDS))
        if unknown:
            raise serializers.ValidationError({name: ["unknown field"] for name in unknown})
        return super().to_internal_value(data)
