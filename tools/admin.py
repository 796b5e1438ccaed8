"""Tools in the admin: built-ins shown read-only, a tenant's own tools switchable.

Tools are created, reconfigured and deleted in the app or the API, where the URL, header
and schema rules live (``tools.services``): here only what every tool kind may change
there can change (enabled, approval, owner-only, timeout, description). Header values are
never displayed, only their names.
"""

from typing import Any

from django import forms
from django.contrib import admin

from core.admin import TenantScopedAdmin, admin_actor_for_tenant
from tools.builtins.base import BUILTIN_REGISTRY
from tools.models import Tool, ToolKind
from tools.registry import is_available
from tools.services import tool_update

TIMEOUT_RANGE = (1.0, 300.0)


CHANGEABLE_FIELDS = ("description", "is_enabled", "requires_approval", "owner_only", "timeout_seconds")


class ToolForm(forms.ModelForm):
    class Meta:
        model = Tool
        fields = list(CHANGEABLE_FIELDS)

    def clean_timeout_seconds(self) -> float:
        timeout: float = self.cleaned_data["timeout_seconds"]
        low, high = TIMEOUT_RANGE
        if not low <= timeout <= high:
            raise forms.ValidationError(f"Must be between {low:g} and {high:g}.")
        return timeout


@admin.register(Tool)
class ToolAdmin(TenantScopedAdmin):
    form = ToolForm
    shows_shared_rows = True
    # MCP tools follow their server: deleting the server removes them.
    is_deleted_with_parent = True
    list_display = ["name", "kind", "group", "tenant", "is_enabled", "requires_approval", "updated_at"]
    list_filter = ["kind", "is_enabled", "requires_approval", "tenant"]
    search_fields = ["name", "description", "group"]
    list_select_related = ["tenant"]
    fields = [
        "tenant",
        "name",
        "kind",
        "group",
        "description",
        "is_enabled",
        "requires_approval",
        "owner_only",
        "timeout_seconds",
        "is_read_only",
        "availability",
        "http_method",
        "url_template",
        "header_names",
        "secret_header_names",
        "mcp_server",
        "mcp_tool_name",
        "input_schema",
        "created_at",
        "updated_at",
    ]
    readonly_fields = [
        "tenant",
        "name",
        "kind",
        "group",
        "is_read_only",
        "availability",
        "http_method",
        "url_template",
        "header_names",
        "secret_header_names",
        "mcp_server",
        "mcp_tool_name",
        "input_schema",
        "created_at",
        "updated_at",
    ]

    def has_add_permission(self, request: Any) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def save_model(self, request: Any, obj: Tool, form: Any, change: bool) -> None:
        """Through the service the app and the API use, which records the change."""
        stored = Tool.objects.select_related("tenant").get(pk=obj.pk)
        assert stored.tenant is not None  # built-ins are read-only here (can_write)
        fields = {name: form.cleaned_data[name] for name in CHANGEABLE_FIELDS}
        tool_update(actor=admin_actor_for_tenant(request, stored.tenant), tool=stored, **fields)

    @admin.display(description="Availability")
    def availability(self, tool: Tool) -> str:
        """A built-in that cannot run here is hidden from agents; this says why."""
        if is_available(tool):
            return "available"
        if tool.kind == ToolKind.MCP:
            return "hidden from agents: its MCP server is disabled"
        builtin = BUILTIN_REGISTRY.get(tool.name)
        reason = builtin.unavailable_reason() if builtin is not None else ""
        return f"hidden from agents: {reason or 'not configured on this server'}"

    @admin.display(description="Header names")
    def header_names(self, tool: Tool) -> str:
        return ", ".join(sorted(tool.headers or {})) or "-"

    @admin.display(description="Secret header names")
    def secret_header_names(self, tool: Tool) -> str:
        return ", ".join(sorted(tool.secret_headers or {})) or "-"
