"""Admin that follows tenant roles: superusers see everything, others only their active tenant.

A non-superuser acts in the tenant their session has active (the app's tenant switcher,
``tenants.actors``), with their role there: viewers may look, admins may change tenant-owned
rows (owners for the tenant itself). ``TenantScopedAdmin`` is the one place that scoping
lives: changelists, search, autocomplete, form choices (dropdowns, raw ids), list filters
and object permissions all go through ``tenant_rows`` and ``TenantScopedAdmin.scope``.
"""

from typing import Any

from django.contrib import admin
from django.contrib.admin.exceptions import NotRegistered
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.admin.utils import get_fields_from_path
from django.contrib.admin.widgets import ForeignKeyRawIdWidget
from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest

from tenants.actors import Actor, actor_from_request
from tenants.models import Membership, Role, Tenant
from tenants.sign_in_throttle import ThrottledAuthenticationForm


def admin_actor(request: HttpRequest) -> Actor | None:
    """The signed-in user in their active tenant: the same actor the app's pages use."""
    if not request.user.is_authenticated:
        return None
    return actor_from_request(request)


def admin_actor_for_tenant(request: HttpRequest, tenant: Tenant) -> Actor:
    """Who a write from the admin acts as, for the services: a superuser acts as an owner of the
    row's tenant; anyone else as themselves in their active tenant (the row's, by the admin's scope).
    """
    if request.user.is_superuser:
        return Actor(user=request.user, tenant=tenant, role=Role.OWNER)
    actor = admin_actor(request)
    if actor is None or actor.tenant.pk != tenant.pk:
        raise PermissionDenied("This row is not in your active tenant.")
    return actor


def tenant_rows(admin_site: admin.AdminSite, request: HttpRequest, model: type[Model]) -> QuerySet[Any]:
    """The rows of ``model`` a non-superuser may see or pick in the admin.

    A model registered with a ``TenantScopedAdmin`` answers with that admin's scope; any
    other model with a ``tenant`` field with the active tenant's rows; anything else, nothing.
    """
    manager = model._default_manager
    if request.user.is_superuser:
        return manager.all()
    try:
        model_admin = admin_site.get_model_admin(model)
    except NotRegistered:
        model_admin = None
    if isinstance(model_admin, TenantScopedAdmin):
        return model_admin.get_queryset(request)
    actor = admin_actor(request)
    if actor is None or "tenant" not in {field.name for field in model._meta.get_fields()}:
        return manager.none()
    return manager.filter(tenant=actor.tenant)


class TenantMemberAuthenticationForm(ThrottledAuthenticationForm, AdminAuthenticationForm):
    """Tenant members sign in to the admin by role, not by Django's is_staff flag; failures count
    towards the same lockout as the app's sign-in."""

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
        if not request.user.is_active:
            return False
        return bool(request.user.is_superuser or admin_actor(request) is not None)

    def each_context(self, request: HttpRequest) -> dict[str, Any]:
        context = super().each_context(request)
        actor = admin_actor(request) if not request.user.is_superuser else None
        if actor is not None:
            # Says whose rows these are; the app's tenant switcher changes it.
            context["site_header"] = f"{self.site_header} · {actor.tenant.name}"
        return context


class TenantRawIdWidget(ForeignKeyRawIdWidget):
    """A raw id input that names its current value only if the value is a row in scope."""

    def __init__(self, *args: Any, allowed: QuerySet[Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.allowed = allowed

    def label_and_url_for_value(self, value: Any) -> tuple[str, str]:
        key = self.rel.get_related_field().name
        try:
            is_allowed = self.allowed.filter(**{key: value}).exists()
        except (ValueError, ValidationError):  # a malformed id is simply not in scope
            is_allowed = False
        if not is_allowed:
            return "", ""
        label, url = super().label_and_url_for_value(value)
        return str(label), url


class TenantRelatedFieldListFilter(admin.RelatedFieldListFilter):
    """Choices: the related rows this changelist's own rows point at, within the active tenant."""

    def field_choices(self, field: Any, request: HttpRequest, model_admin: Any) -> Any:
        referenced = model_admin.get_queryset(request).values_list(f"{self.field_path}__pk", flat=True)
        allowed = tenant_rows(model_admin.admin_site, request, field.related_model).values("pk")
        ordering = self.field_admin_ordering(field, request, model_admin)
        return field.get_choices(
            include_blank=False,
            limit_choices_to=Q(pk__in=referenced) & Q(pk__in=allowed),
            ordering=ordering,
        )


class TenantScopedAdmin(admin.ModelAdmin):
    """For models with a ``tenant`` field (set ``tenant_path`` for indirect ones).

    ``is_view_only``: nobody changes these rows here (superusers included), because only the
    services that own them keep their invariants. ``is_deleted_with_parent``: deleting a row
    they hang off (an agent, a server) may still remove them. ``shows_shared_rows``: rows
    without a tenant (built-in tools) are shown, read-only, to every tenant.
    """

    tenant_path = "tenant"
    view_role: str = Role.VIEWER
    write_role: str = Role.ADMIN
    is_view_only = False
    is_deleted_with_parent = False
    shows_shared_rows = False

    def scope(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if request.user.is_superuser:
            return queryset
        actor = admin_actor(request)
        if actor is None or not actor.can(self.view_role):
            return queryset.none()
        condition = Q(**{self.tenant_path: actor.tenant.pk})
        if self.shows_shared_rows:
            condition |= Q(**{f"{self.tenant_path}__isnull": True})
        return queryset.filter(condition)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return self.scope(request, super().get_queryset(request))

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        # The changelist and autocomplete hand in a scoped queryset already; scoping again
        # keeps a search from ever reaching further, whoever calls it.
        queryset, may_have_duplicates = super().get_search_results(request, queryset, search_term)
        return self.scope(request, queryset), may_have_duplicates

    # --- Object permissions ----------------------------------------------------------

    def row_tenant_id(self, obj: Model) -> Any:
        value: Any = obj
        for part in self.tenant_path.split("__"):
            value = getattr(value, part)
            if value is None:
                return None
        return value.pk if isinstance(value, Model) else value

    def is_in_tenant(self, actor: Actor, obj: Model) -> bool:
        tenant_id = self.row_tenant_id(obj)
        return tenant_id == actor.tenant.pk or (self.shows_shared_rows and tenant_id is None)

    def has_role(self, request: HttpRequest, role: str, obj: Model | None = None) -> bool:
        if request.user.is_superuser:
            return True
        actor = admin_actor(request)
        if actor is None or not actor.can(role):
            return False
        return obj is None or self.is_in_tenant(actor, obj)

    def can_write(self, request: HttpRequest, obj: Model | None) -> bool:
        if self.is_view_only:
            return False
        if obj is not None and self.shows_shared_rows and self.row_tenant_id(obj) is None:
            return False
        return self.has_role(request, self.write_role, obj)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return self.has_role(request, self.view_role)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.has_role(request, self.view_role, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.can_write(request, None)

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.can_write(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return self.can_write(request, obj)

    def get_deleted_objects(self, objs: Any, request: HttpRequest) -> tuple[Any, Any, set[str], Any]:
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        followers = {
            model._meta.verbose_name
            for model, model_admin in self.admin_site._registry.items()
            if getattr(model_admin, "is_deleted_with_parent", False)
        }
        return deleted, counts, perms_needed - followers, protected

    # --- Choices: dropdowns, raw ids, autocomplete, list filters -----------------------

    def allowed_choices(
        self, request: HttpRequest, db_field: Any, given: QuerySet[Any] | None
    ) -> QuerySet[Any]:
        allowed = tenant_rows(self.admin_site, request, db_field.remote_field.model)
        if given is None:
            return allowed
        return given.filter(pk__in=allowed.values("pk"))

    def formfield_for_foreignkey(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if not request.user.is_superuser:
            kwargs["queryset"] = self.allowed_choices(request, db_field, kwargs.get("queryset"))
            if "widget" not in kwargs and db_field.name in self.raw_id_fields:
                kwargs["widget"] = TenantRawIdWidget(
                    db_field.remote_field,
                    self.admin_site,
                    allowed=kwargs["queryset"],
                    using=kwargs.get("using"),
                )
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field: Any, request: HttpRequest, **kwargs: Any) -> Any:
        if not request.user.is_superuser:
            kwargs["queryset"] = self.allowed_choices(request, db_field, kwargs.get("queryset"))
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial: dict[str, Any] = super().get_changeform_initial_data(request)
        actor = admin_actor(request)
        if actor is not None and self.tenant_path == "tenant":
            initial.setdefault("tenant", actor.tenant.pk)
        return initial

    def get_list_filter(self, request: HttpRequest) -> Any:
        list_filter = super().get_list_filter(request)
        if request.user.is_superuser:
            return list_filter
        scoped = (self.tenant_list_filter(entry) for entry in list_filter)
        return [entry for entry in scoped if entry is not None]

    def tenant_list_filter(self, entry: Any) -> Any:
        """A list filter as a non-superuser gets it: none by tenant, relations in scope."""
        name, filter_class = entry if isinstance(entry, tuple) else (entry, None)
        if not isinstance(name, str):
            return entry  # a SimpleListFilter: it chooses its own lookups from the scoped queryset
        if name in ("tenant", self.tenant_path) or name.startswith("tenant__"):
            return None  # one tenant in view: nothing to choose, and no other tenant to name
        field = get_fields_from_path(self.model, name)[-1]
        if field.is_relation and (
            filter_class is None or issubclass(filter_class, admin.RelatedFieldListFilter)
        ):
            return (name, TenantRelatedFieldListFilter)
        return entry
