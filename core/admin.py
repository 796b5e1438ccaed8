"""Admin that follows tenant roles: superusers see everything, others only their tenants.

Viewers may look, admins may change tenant-owned rows (owners for memberships); the
same rule the API and pages apply.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from tenants.models import Membership, Role, role_at_least


def tenant_ids_with_role(request: HttpRequest, required_role: str) -> list[Any]:
    cache_name = f"_agentry_admin_tenants_{required_role}"
    cached = getattr(request, cache_name, None)
    if cached is None:
        memberships = Membership.objects.filter(user_id=int(request.user.pk or 0)).values_list(
            "tenant_id", "role"
        )
        cached = [tenant_id for tenant_id, role in memberships if role_at_least(role, required_role)]
        setattr(request, cache_name, cached)
    return cached


class TenantMemberAuthenticationForm(AdminAuthenticationForm):
    """Tenant members sign in to the admin by role, not by Django's is_staff flag."""

    def confirm_login_allowed(self, user: AbstractBaseUser) -> None:
        if not user.is_active:
            raise self.get_invalid_login_error()
        if not (getattr(user, "is_superuser", False) or Membership.objects.filter(user_id=user.pk).exists()):
            raise self.get_invalid_login_error()


class AgentryAdminSite(admin.AdminSite):
    site_header = "Agentry administration"
    site_title = "Agentry admin"
    login_form = TenantMemberAuthenticationForm

    def has_permission(self, request: HttpRequest) -> bool:
        user = request.user
        if not user.is_active:
            return False
        return bool(user.is_superuser or tenant_ids_with_role(request, Role.VIEWER))


class TenantScopedAdmin(admin.ModelAdmin):
    """For models with a ``tenant`` field (set ``tenant_path`` for indirect ones)."""

    tenant_path = "tenant"
    write_role: str = Role.ADMIN

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        return queryset.filter(**{f"{self.tenant_path}__in": tenant_ids_with_role(request, Role.VIEWER)})

    def _tenant_id_of(self, obj: Model) -> Any:
        value: Any = obj
        for part in self.tenant_path.split("__"):
            value = getattr(value, part)
        return value.pk

    def _can_write(self, request: HttpRequest, obj: Model | None) -> bool:
        if request.user.is_superuser:
            return True
        writable = tenant_ids_with_role(request, self.write_role)
        if obj is None:
            return bool(writable)
        return self._tenant_id_of(obj) in writable

    def has_module_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser or tenant_ids_with_role(request, Role.VIEWER))

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        if request.user.is_superuser:
            return True
        if obj is None:
            return bool(tenant_ids_with_role(request, Role.VIEWER))
        return self._tenant_id_of(obj) in tenant_ids_with_role(request, Role.VIEWER)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self._can_write(request, None)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._can_write(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self._can_write(request, obj)

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if db_field.name == "tenant" and not request.user.is_superuser:
            from tenants.models import Tenant

            kwargs["queryset"] = Tenant.objects.filter(pk__in=tenant_ids_with_role(request, self.write_role))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)
