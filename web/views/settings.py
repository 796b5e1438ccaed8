from typing import Any

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from billing.selectors import budget_form_choices, credits_overview_for_actor
from tenants.actors import Actor
from tenants.invitations import (
    CreatedInvitation,
    invitation_create,
    invitation_get_for_actor,
    invitation_revoke,
)
from tenants.models import Role
from tenants.provider_keys.selectors import provider_key_list_for_actor
from tenants.services import api_key_revoke
from web.access import page, render_page, require_role
from web.forms.common import apply_service_errors
from web.forms.credits import BudgetForm, BudgetLimitForm, CreditGrantForm
from web.forms.provider_keys import ProviderKeyForm
from web.forms.settings import ApiKeyForm, MemberAddForm, MemberRoleForm, TenantLimitsForm
from web.responses import error_text
from web.selectors import api_key_get_for_actor, membership_get_for_actor, tenant_settings_for_actor
from web.services import api_key_create_for_actor, member_remove, member_role_set, tenant_limits_update


def _settings_page(
    request: HttpRequest,
    actor: Actor,
    *,
    member_form: MemberAddForm | None = None,
    key_form: ApiKeyForm | None = None,
    limits_form: TenantLimitsForm | None = None,
    provider_key_form: ProviderKeyForm | None = None,
    grant_form: CreditGrantForm | None = None,
    budget_form: BudgetForm | None = None,
    new_key: str = "",
    new_invitation: CreatedInvitation | None = None,
    status: int = 200,
) -> HttpResponse:
    overview = tenant_settings_for_actor(actor=actor)
    current = {name: value for name, value, _ in overview.limits}
    members, agents = budget_form_choices(actor=actor)
    context = {
        "overview": overview,
        "member_form": member_form or MemberAddForm(),
        "key_form": key_form or ApiKeyForm(),
        "limits_form": limits_form or TenantLimitsForm(current=current),
        "roles": Role.choices,
        "new_key": new_key,
        "new_invitation": new_invitation,
        "sends_email": settings.EMAIL_BACKEND != "django.core.mail.backends.dummy.EmailBackend",
        "provider_keys": list(provider_key_list_for_actor(actor=actor)),
        "provider_key_form": provider_key_form or ProviderKeyForm(),
        "credits": credits_overview_for_actor(actor=actor),
        "grant_form": grant_form or CreditGrantForm(),
        "budget_form": budget_form or BudgetForm(members=members, agents=agents),
        "budget_limit_form": BudgetLimitForm(),
    }
    return render_page(request, actor, "web/settings/page.html", context, status=status)


def render_settings_page(
    request: HttpRequest, actor: Actor, *, forms: dict[str, Any], status: int
) -> HttpResponse:
    """The page again, with one section's form and its errors (web.views.provider_keys, .credits)."""
    return _settings_page(request, actor, **forms, status=status)


@page(role=Role.ADMIN)
def settings_page(request: HttpRequest, actor: Actor) -> HttpResponse:
    return _settings_page(request, actor)


@require_POST
@page(role=Role.ADMIN)
def member_add_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    """Every address gets an invitation, so the answer never tells whether it has an account."""
    form = MemberAddForm(request.POST)
    if form.is_valid():
        try:
            created = invitation_create(
                actor=actor,
                **form.cleaned_data,
                link_for=lambda token: request.build_absolute_uri(reverse("web:invitation", args=[token])),
            )
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            # The link exists only in this response: only a digest of its token is stored.
            response = _settings_page(request, actor, new_invitation=created)
            response["Cache-Control"] = "no-store"
            return response
    return _settings_page(request, actor, member_form=form, status=400)


@require_POST
@page(role=Role.ADMIN)
def invitation_revoke_view(request: HttpRequest, actor: Actor, invitation_id: str) -> HttpResponse:
    invitation = invitation_get_for_actor(actor=actor, invitation_id=invitation_id)
    try:
        invitation_revoke(actor=actor, invitation=invitation)
    except ValidationError as error:
        messages.error(request, error_text(error))
    else:
        messages.success(request, f"Invitation for {invitation.email} revoked.")
    return redirect("web:settings")


@require_POST
@page(role=Role.ADMIN)
def member_role_view(request: HttpRequest, actor: Actor, membership_id: str) -> HttpResponse:
    membership = membership_get_for_actor(actor=actor, membership_id=membership_id)
    form = MemberRoleForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose a role.")
        return redirect("web:settings")
    try:
        member_role_set(actor=actor, membership=membership, role=form.cleaned_data["role"])
    except ValidationError as error:
        messages.error(request, error_text(error))
    else:
        messages.success(request, f"{membership.user.username} is now {membership.role}.")
    return redirect("web:settings")


@require_POST
@page(role=Role.ADMIN)
def member_remove_view(request: HttpRequest, actor: Actor, membership_id: str) -> HttpResponse:
    membership = membership_get_for_actor(actor=actor, membership_id=membership_id)
    try:
        member_remove(actor=actor, membership=membership)
    except ValidationError as error:
        messages.error(request, error_text(error))
    else:
        messages.success(request, f"{membership.user.username} removed from {actor.tenant.name}.")
    return redirect("web:settings")


@require_POST
@page(role=Role.ADMIN)
def api_key_create_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    form = ApiKeyForm(request.POST)
    if not form.is_valid():
        return _settings_page(request, actor, key_form=form, status=400)
    plaintext = api_key_create_for_actor(
        actor=actor,
        name=form.cleaned_data["name"],
        scope=form.cleaned_data["scope"],
        expires_in_days=form.cleaned_data["expires_in_days"],
    )
    # The plaintext exists only in this response: it is not stored, so it cannot be shown again.
    response = _settings_page(request, actor, new_key=plaintext)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@page(role=Role.ADMIN)
def api_key_revoke_view(request: HttpRequest, actor: Actor, api_key_id: str) -> HttpResponse:
    api_key = api_key_revoke(api_key=api_key_get_for_actor(actor=actor, api_key_id=api_key_id))
    messages.success(request, f"API key “{api_key.name}” revoked.")
    return redirect("web:settings")


@require_POST
@page(role=Role.ADMIN)
def limits_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    require_role(actor, Role.OWNER)
    overview = tenant_settings_for_actor(actor=actor)
    form = TenantLimitsForm(request.POST, current={name: value for name, value, _ in overview.limits})
    if form.is_valid():
        try:
            tenant_limits_update(actor=actor, limits=form.cleaned_data)
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            messages.success(request, "Limits saved.")
            return redirect("web:settings")
    return _settings_page(request, actor, limits_form=form, status=400)
