from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from audit.models import AuditEntry

CHANGES_SCHEMA = {
    "type": "object",
    "description": 'Each changed field\'s `[old, new]`; secrets read "[redacted]".',
    "additionalProperties": {"type": "array", "minItems": 2, "maxItems": 2, "items": {}},
}


@extend_schema_field(CHANGES_SCHEMA)
class ChangesField(serializers.JSONField):
    pass


class AuditEntrySerializer(serializers.ModelSerializer):
    actor = serializers.IntegerField(
        source="actor_id",
        read_only=True,
        allow_null=True,
        help_text="The user's id; null for a deleted user or the system.",
    )
    changes = ChangesField(read_only=True)

    class Meta:
        model = AuditEntry
        fields = [
            "id",
            "created_at",
            "actor",
            "actor_label",
            "source",
            "api_key_prefix",
            "remote_address",
            "action",
            "object_type",
            "object_id",
            "object_label",
            "changes",
        ]
        read_only_fields = fields


class AuditFilterSerializer(serializers.Serializer):
    """The list's query parameters; an unreadable value is refused (400), not ignored."""

    actor = serializers.CharField(required=False, max_length=254, help_text="A user id or e-mail address.")
    object_type = serializers.CharField(
        required=False, max_length=40, help_text="e.g. agent, tool_policy, mcp_server."
    )
    since = serializers.DateField(required=False, help_text="First day (ISO date), included.")
    until = serializers.DateField(required=False, help_text="Last day (ISO date), included.")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        since, until = attrs.get("since"), attrs.get("until")
        if since is not None and until is not None and until < since:
            raise serializers.ValidationError({"until": ["Must be on or after since."]})
        return attrs
