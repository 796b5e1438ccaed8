"""Tenants, members, users, API keys and provider keys in the admin.

Members are added, re-roled and removed in the app (Settings → Members), where the
invitation and last-owner rules live: here tenant admins only look at memberships and
users. Like the app's settings page, these pages are for admins and owners. Secrets are
never displayed: API keys show their prefix, provider keys whether one is set, and a
provider key is write-only (typed to replace it, never rendered back).
"""

from typing import Any

from django import forms
from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from core.admin import TenantScopedAdmin, admin_actor_for_tenant
from tenants.actors import Actor
from tenants.models import ApiKey, Membership, ProviderKey, Role, Tenant
from tenants.provider_keys.services import provider_key_delete, provider_key_save_checked
from tenants.services import (
    api_key_delete,
    api_key_revoke,
    api_key_update,
    membership_delete,
    membership_role_update,
    membership_set,
)

User = get_user_model()


@admin.register(Tenant)
class TenantAdmin(TenantScopedAdmin):
    tenant_path = "pk"
    write_role = Role.OWNER
    list_display = ["slug", "name", "created_at"]
    search_fields = ["slug", "name"]
    readonly_fields = ["created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        # Limits are raised in the app, within the ranges tenant_limits_update enforces;
        # the slug is the platform's handle for the tenant.
        if request.user.is_superuser:
            return self.readonly_fields
        return ["slug", "settings", "created_at"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return bool(request.user.is_superuser)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return bool(request.user.is_superuser)


class SuperuserWritesAdmin(TenantScopedAdmin):
    """Tenant admins look, as on the app's settings page; only superusers change here."""

    view_role = Role.ADMIN

    def can_write(self, request: HttpRequest, obj: Model | None) -> bool:
        return bool(request.user.is_superuser)


@admin.register(Membership)
class MembershipAdmin(SuperuserWritesAdmin):
    """A membership's person and tenant are chosen when it is added; after that only its role changes."""

    list_display = ["user", "tenant", "role", "created_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["user__email", "user__username", "tenant__slug"]
    list_select_related = ["user", "tenant"]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ["tenant", "user", "created_at"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Membership, form: Any, change: bool) -> None:
        if change:
            membership_role_update(membership=Membership.objects.get(pk=obj.pk), role=obj.role)
        else:
            created = membership_set(tenant=obj.tenant, user=obj.user, role=obj.role)
            obj.pk = created.pk

    def delete_model(self, request: HttpRequest, obj: Membership) -> None:
        membership_delete(membership=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Membership]) -> None:
        for membership in queryset:
            membership_delete(membership=membership)


admin.site.unregister(User)


@admin.register(User)
class TenantUserAdmin(SuperuserWritesAdmin, UserAdmin):
    """Users: a tenant admin sees the active tenant's members, and no credentials."""

    tenant_path = "memberships__tenant"
    member_fields = ["username", "email", "first_name", "last_name", "is_active", "last_login", "date_joined"]

    def is_in_tenant(self, actor: Actor, obj: Model) -> bool:
        return Membership.objects.filter(tenant=actor.tenant, user_id=obj.pk).exists()

    def get_list_display(self, request: HttpRequest) -> Any:
        if request.user.is_superuser:
            return super().get_list_display(request)
        return ["username", "email", "first_name", "last_name", "last_login"]

    def get_list_filter(self, request: HttpRequest) -> Any:
        if request.user.is_superuser:
            return super().get_list_filter(request)
        return ["is_active"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        if request.user.is_superuser:
            return super().get_fieldsets(request, obj)
        return [(None, {"fields": self.member_fields})]


@admin.register(ApiKey)
class ApiKeyAdmin(TenantScopedAdmin):
    """Keys are created through the API or create_tenant (the plaintext is shown once there)."""

    view_role = Role.ADMIN

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

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        api_key_update(api_key=ApiKey.objects.get(pk=obj.pk), name=obj.name, expires_at=obj.expires_at)

    def delete_model(self, request: HttpRequest, obj: ApiKey) -> None:
        api_key_delete(api_key=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        for api_key in queryset:
            api_key_delete(api_key=api_key)

    @admin.action(description="Revoke selected API keys")
    def revoke_keys(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        revoked = 0
        for api_key in queryset.filter(revoked_at__isnull=True):
            if self.can_write(request, api_key):
                api_key_revoke(api_key=api_key)
                revoked += 1
        self.message_user(request, f"Revoked {revoked} API key(s).", messages.SUCCESS)


class ProviderKeyForm(forms.ModelForm):
    """The key is a form field of its own, so the stored key is never a form's initial value."""

    new_api_key = forms.CharField(
        label="API key",
        required=False,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        help_text="Write-only: stored encrypted, never shown. Leave empty to keep the current key.",
    )

    class Meta:
        model = ProviderKey
        fields = ["tenant", "provider"]

    def clean_new_api_key(self) -> str:
        key: str = self.cleaned_data["new_api_key"].strip()
        if not key and self.instance._state.adding:
            raise forms.ValidationError("Enter the provider's API key.")
        return key


@admin.register(ProviderKey)
class ProviderKeyAdmin(TenantScopedAdmin):
    """A tenant's own model-provider keys. The base URL is set in the app, where its rules live."""

    view_role = Role.ADMIN
    form = ProviderKeyForm
    list_display = ["provider", "tenant", "key_status", "base_url", "updated_at"]
    list_filter = ["provider", "tenant"]
    search_fields = ["provider", "base_url", "tenant__slug"]
    readonly_fields = ["key_status", "base_url", "created_at", "updated_at"]

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        fields: list[Any] = ["tenant", "provider"]
        if obj is None or self.has_change_permission(request, obj):
            fields.append("new_api_key")
        if obj is not None:
            fields += self.readonly_fields
        return fields

    @admin.display(description="key")
    def key_status(self, provider_key: ProviderKey) -> str:
        return "set (encrypted, never shown)" if provider_key.api_key else "not set"

    def save_model(self, request: HttpRequest, obj: ProviderKey, form: Any, change: bool) -> None:
        if form.cleaned_data.get("new_api_key"):
            obj.api_key = form.cleaned_data["new_api_key"]
        provider_key_save_checked(provider_key=obj)

    def delete_model(self, request: HttpRequest, obj: ProviderKey) -> None:
        provider_key_delete(actor=admin_actor_for_tenant(request, obj.tenant), provider_key=obj)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ProviderKey]) -> None:
        for provider_key in queryset:
            self.delete_model(request, provider_key)
