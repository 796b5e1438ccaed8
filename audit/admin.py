"""The audit log in the admin: read-only for everyone, superusers included, and tenant-scoped."""

from typing import Any

from django.contrib import admin

from audit.models import AuditEntry
from core.admin import TenantScopedAdmin
from tenants.models import Role


@admin.register(AuditEntry)
class AuditEntryAdmin(TenantScopedAdmin):
    view_role = Role.ADMIN
    # Entries are written only by the services that change things; retention removes them.
    is_view_only = True
    list_display = ["created_at", "actor_label", "source", "action", "object_type", "object_label", "tenant"]
    list_filter = ["source", "action", "object_type", "tenant"]
    search_fields = ["actor_label", "object_label", "object_id"]
    list_select_related = ["tenant"]
    date_hierarchy = "created_at"
    fields = (
        "tenant",
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
    )
    readonly_fields = fields
    raw_id_fields = ["actor"]

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
