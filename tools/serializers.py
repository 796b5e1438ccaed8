from typing import Any

from rest_framework import serializers

from core.api.serializers import StrictSerializer
from tools.models import Tool, ToolPolicy, ToolProfile


class ToolSerializer(serializers.ModelSerializer):
    """Secret headers are write-only: responses name them, never show their values."""

    secret_header_names = serializers.SerializerMethodField()
    mcp_server = serializers.UUIDField(source="mcp_server_id", read_only=True, allow_null=True)
    is_builtin = serializers.SerializerMethodField()

    class Meta:
        model = Tool
        fields = [
            "id",
            "name",
            "description",
            "kind",
            "group",
            "input_schema",
            "is_builtin",
            "is_read_only",
            "requires_approval",
            "owner_only",
            "timeout_seconds",
            "is_enabled",
            "http_method",
            "url_template",
            "headers",
            "secret_header_names",
            "mcp_server",
            "mcp_tool_name",
            "annotations",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_secret_header_names(self, tool: Tool) -> list[str]:
        return sorted(tool.secret_headers or {})

    def get_is_builtin(self, tool: Tool) -> bool:
        return tool.tenant_id is None


class HttpToolWriteSerializer(StrictSerializer):
    name = serializers.CharField(max_length=64)
    description = serializers.CharField(max_length=4000, required=False, allow_blank=True)
    group = serializers.CharField(max_length=64, required=False)
    input_schema = serializers.DictField(required=False)
    is_read_only = serializers.BooleanField(required=False)
    requires_approval = serializers.BooleanField(required=False)
    owner_only = serializers.BooleanField(required=False)
    timeout_seconds = serializers.FloatField(required=False)
    is_enabled = serializers.BooleanField(required=False)
    http_method = serializers.ChoiceField(choices=["GET", "POST", "PUT", "PATCH", "DELETE"], required=False)
    url_template = serializers.CharField(max_length=2000)
    headers = serializers.DictField(child=serializers.CharField(max_length=2000), required=False)
    secret_headers = serializers.DictField(
        child=serializers.CharField(max_length=4000),
        required=False,
        write_only=True,
        help_text="Header values stored encrypted; never returned.",
    )


class ToolUpdateSerializer(HttpToolWriteSerializer):
    name = serializers.CharField(max_length=64, required=False)
    url_template = serializers.CharField(max_length=2000, required=False)


class ToolPolicySerializer(serializers.ModelSerializer):
    class Meta:
        model = ToolPolicy
        fields = [
            "profile",
            "allow",
            "deny",
            "max_calls_per_turn",
            "max_calls_per_run",
            "require_approval",
            "editable_arguments",
        ]


class EffectiveToolSerializer(serializers.Serializer):
    name = serializers.CharField()
    group = serializers.CharField()
    kind = serializers.CharField()
    is_allowed = serializers.BooleanField()
    reason = serializers.CharField()
    requires_approval = serializers.BooleanField()
    arguments_editable_at_approval = serializers.BooleanField()
    is_read_only = serializers.BooleanField()


class AgentToolsSerializer(serializers.Serializer):
    policy = ToolPolicySerializer()
    assigned_tools = serializers.ListField(child=serializers.UUIDField())
    tools = EffectiveToolSerializer(many=True)


class AgentToolsUpdateSerializer(StrictSerializer):
    profile = serializers.ChoiceField(choices=ToolProfile.choices, required=False)
    allow = serializers.ListField(child=serializers.CharField(max_length=100), required=False, max_length=200)
    deny = serializers.ListField(child=serializers.CharField(max_length=100), required=False, max_length=200)
    require_approval = serializers.ListField(
        child=serializers.CharField(max_length=100), required=False, max_length=200
    )
    editable_arguments = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        max_length=200,
        help_text="Tools (names, group:<name>, * wildcards) whose arguments the approver may edit.",
    )
    max_calls_per_turn = serializers.IntegerField(required=False)
    max_calls_per_run = serializers.IntegerField(required=False)
    assigned_tools = serializers.ListField(child=serializers.UUIDField(), required=False, max_length=500)

    def policy_fields(self) -> dict[str, Any]:
        return {name: value for name, value in self.validated_data.items() if name != "assigned_tools"}
