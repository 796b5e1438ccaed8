from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from core.api.serializers import StrictModelSerializer
from mcp_servers.models import McpHealth, McpServer, McpTransport
from tools.models import Tool


class McpToolSerializer(serializers.ModelSerializer):
    class Meta:
        model = Tool
        fields = [
            "id",
            "name",
            "mcp_tool_name",
            "description",
            "group",
            "input_schema",
            "annotations",
            "is_read_only",
            "is_enabled",
        ]
        read_only_fields = fields


class McpServerSerializer(StrictModelSerializer):
    """Credentials are write-only: responses say which are set (``has_token``,
    ``header_names``, ``env_names``), never their values. ``null`` or empty clears one."""

    transport = serializers.ChoiceField(choices=McpTransport.choices)
    token = serializers.CharField(
        write_only=True,
        required=False,
        allow_null=True,
        allow_blank=True,
        max_length=4000,
        trim_whitespace=True,
    )
    headers = serializers.DictField(
        child=serializers.CharField(max_length=4000, allow_blank=True, trim_whitespace=False),
        write_only=True,
        required=False,
        allow_null=True,
    )
    env = serializers.DictField(
        child=serializers.CharField(max_length=4000, allow_blank=True, trim_whitespace=False),
        write_only=True,
        required=False,
        allow_null=True,
    )
    args = serializers.ListField(
        child=serializers.CharField(max_length=1000, allow_blank=True), required=False
    )
    has_token = serializers.SerializerMethodField()
    header_names = serializers.SerializerMethodField()
    env_names = serializers.SerializerMethodField()
    health_status = serializers.ChoiceField(choices=McpHealth.choices, read_only=True)
    tools = McpToolSerializer(many=True, read_only=True)

    class Meta:
        model = McpServer
        fields = [
            "id",
            "name",
            "transport",
            "url",
            "token",
            "has_token",
            "headers",
            "header_names",
            "command",
            "args",
            "env",
            "env_names",
            "connect_timeout_seconds",
            "call_timeout_seconds",
            "is_enabled",
            "health_status",
            "last_checked_at",
            "latency_ms",
            "last_error",
            "tools",
            "created_at",
            "updated_at",
        ]
        read_only_fields = [
            "id",
            "health_status",
            "last_checked_at",
            "latency_ms",
            "last_error",
            "created_at",
            "updated_at",
        ]
        extra_kwargs = {"name": {"allow_blank": True}, "url": {"allow_blank": True}}
        # Uniqueness per tenant is a business rule checked by the service.
        validators: list[object] = []

    def get_has_token(self, server: McpServer) -> bool:
        return bool(server.token)

    def get_header_names(self, server: McpServer) -> list[str]:
        return sorted(server.headers or {})

    def get_env_names(self, server: McpServer) -> list[str]:
        return sorted(server.env or {})


class ToolChangesSerializer(serializers.Serializer):
    added = serializers.ListField(child=serializers.CharField(), help_text="Tools new on the server.")
    changed = serializers.ListField(
        child=serializers.CharField(), help_text="Tools whose schema or text changed."
    )
    removed = serializers.ListField(
        child=serializers.CharField(), help_text="Tools the server no longer offers."
    )
    issues = serializers.ListField(
        child=serializers.CharField(),
        help_text="Tools that cannot be used, and why (makes the server degraded).",
    )


class McpServerCheckSerializer(McpServerSerializer):
    """The server after the check, with what changed in its tool list."""

    changes = serializers.SerializerMethodField()

    class Meta(McpServerSerializer.Meta):
        fields = [*McpServerSerializer.Meta.fields, "changes"]

    @extend_schema_field(ToolChangesSerializer)
    def get_changes(self, server: McpServer) -> dict[str, Any]:
        return ToolChangesSerializer(self.context["changes"]).data
