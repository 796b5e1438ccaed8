from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from core.admin import TenantScopedAdmin, tenant_ids_with_role
from tenants.models import ApiKey, Membership, Role, Tenant
from tenants.services import api_key_revoke


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "pk"
    write_role = Role.OWNER
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    readonly_fields = ["created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = admin.ModelAdmin.get_queryset(self, request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(pk__in=tenant_ids_with_role(request, Role.VIEWER))

    def _tenant_id_of(self, obj: Any) -> Any:
        return obj.pk

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


@admin.register(Membership)
class MembershipAdmin(TenantScopedAdmin):
    write_role = Role.OWNER
    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["user__email", "user__username", "tenant__slug"]

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        # Tenant owners may only pick people already in one of their tenants: the admin
        # must not become a directory of every user on the platform.
        if db_field.name == "user" and not request.user.is_superuser:
            tenant_ids = tenant_ids_with_role(request, Role.OWNER)
            kwargs["queryset"] = db_field.related_model.objects.filter(
                memberships__tenant_id__in=tenant_ids
            ).distinct()
        return super().formfield_for_foreignkey(db_field, request, **kwargs)


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Keys are created through the API or create_tenant (the plaintext is shown once there)."""

    list_display = [
        "name",
        "tenant",
        "shown_prefix",
        "scope",
        "created_by",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    list_filter = ["tenant", "scope", ("revoked_at", admin.EmptyFieldListFilter)]
    search_fields = ["name", "prefix", "tenant__slug"]
    fields = [
        "tenant",
        "name",
        "shown_prefix",
        "scope",
        "created_by",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    ]
    readonly_fields = [
        "tenant",
        "shown_prefix",
        "scope",
        "created_by",
        "created_at",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke_keys"]

    @admin.display(description="key")
    def shown_prefix(self, api_key: ApiKey) -> str:
        return f"agt_{api_key.prefix}_…"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    @admin.action(description="Revoke selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = 0
        for api_key in queryset.filter(revoked_at__isnull=True):
            if self._can_write(request, api_key):
                api_key_revoke(api_key=api_key)
                revoked += 1
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)
