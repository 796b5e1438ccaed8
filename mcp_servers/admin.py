"""MCP servers in the admin: health at a glance and a "check now" action.

Credentials are never displayed (the fields are excluded; ``has_token`` says whether one
is set), and servers are created or reconfigured through the API or the app, where the
validation and the stdio rules live: here only enabling, timeouts and the token (write-only)
can change, saved through ``mcp_servers.services`` like the app's and the API's changes.
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.admin import TenantScopedAdmin, admin_actor_for_tenant
from core.api.errors import ServerBusy
from core.http_headers import header_value_problem
from mcp_servers.health import mcp_server_check
from mcp_servers.models import McpServer
from mcp_servers.services import (
    CALL_TIMEOUT_RANGE,
    CONNECT_TIMEOUT_RANGE,
    mcp_server_delete,
    mcp_server_update,
)

CHANGEABLE_FIELDS = ("is_enabled", "connect_timeout_seconds", "call_timeout_seconds")


class McpServerAdminForm(forms.ModelForm):
    """Timeouts within the ranges the app and the API allow (mcp_servers.services)."""

    new_token = forms.CharField(
        label="Token",
        required=False,
        strip=True,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Write-only: stored encrypted, never shown. Leave empty to keep the current token.",
    )

    class Meta:
        model = McpServer
        fields = list(CHANGEABLE_FIELDS)

    def clean_new_token(self) -> str:
        token: str = self.cleaned_data["new_token"]
        if problem := header_value_problem(token):
            raise forms.ValidationError(f"Must not contain {problem}.")
        if token and "authorization" in {name.lower() for name in self.instance.headers or {}}:
            raise forms.ValidationError("This server sends an Authorization header; set that or a token.")
        return token

    def clean(self) -> dict[str, Any]:
        cleaned_data: dict[str, Any] = super().clean() or {}
        for name, (low, high) in (
            ("connect_timeout_seconds", CONNECT_TIMEOUT_RANGE),
            ("call_timeout_seconds", CALL_TIMEOUT_RANGE),
        ):
            value = cleaned_data.get(name)
            if value is not None and not low <= value <= high:
                self.add_error(name, f"Must be between {low:g} and {high:g} seconds.")
        return cleaned_data


@admin.register(McpServer)
class McpServerAdmin(TenantScopedAdmin):
    form = McpServerAdminForm
    list_display = [
        "name",
        "tenant",
        "transport",
        "is_enabled",
        "health_status",
        "latency_ms",
        "last_checked_at",
    ]
    list_filter = ["transport", "health_status", "is_enabled", "tenant"]
    search_fields = ["name", "url", "tenant__slug"]
    exclude = ["token", "headers", "env"]
    readonly_fields = [
        "tenant",
        "name",
        "transport",
        "url",
        "command",
        "args",
        "has_token",
        "header_names",
        "env_names",
        "health_status",
        "last_checked_at",
        "latency_ms",
        "last_error",
        "created_at",
        "updated_at",
    ]
    actions = ["check_now"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def save_model(self, request: HttpRequest, obj: McpServer, form: Any, change: bool) -> None:
        fields = {name: form.cleaned_data[name] for name in CHANGEABLE_FIELDS}
        if form.cleaned_data.get("new_token"):
            fields["token"] = form.cleaned_data["new_token"]
        stored = McpServer.objects.get(pk=obj.pk)
        mcp_server_update(actor=admin_actor_for_tenant(request, stored.tenant), server=stored, **fields)

    def delete_model(self, request: HttpRequest, obj: McpServer) -> None:
        mcp_server_delete(server=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            mcp_server_delete(server=server)

    @admin.display(boolean=True, description="Token set")
    def has_token(self, server: McpServer) -> bool:
        return bool(server.token)

    @admin.display(description="Header names")
    def header_names(self, server: McpServer) -> str:
        return ", ".join(sorted(server.headers or {})) or "-"

    @admin.display(description="Environment variable names")
    def env_names(self, server: McpServer) -> str:
        return ", ".join(sorted(server.env or {})) or "-"

    @admin.action(description="Check the selected servers now")
    def check_now(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            if not self.has_change_permission(request, server):
                continue
            try:
                result = mcp_server_check(server)
            except ServerBusy as busy:
                self.message_user(request, f"{server.name}: not checked: {busy.detail}", messages.WARNING)
                continue
            level = messages.SUCCESS if result.health_status == "healthy" else messages.WARNING
            detail = f": {result.error}" if result.error else ""
            self.message_user(request, f"{server.name}: {result.health_status}{detail}", level)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        actions = super().get_actions(request)
        if not self.can_write(request, None):
            actions.pop("check_now", None)
        return actions
