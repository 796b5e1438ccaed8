"""The settings page's credits and budgets: owners grant credits and set budgets; admins look."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from billing.pricing import credits_text
from billing.selectors import budget_form_choices, budget_get_for_actor
from billing.services import (
    budget_create,
    budget_delete,
    budget_update,
    credits_grant_by_actor,
    credits_set_enabled,
)
from tenants.actors import Actor
from tenants.models import Role
from web.access import page, require_role
from web.forms.common import apply_service_errors
from web.forms.credits import BudgetForm, BudgetLimitForm, CreditGrantForm, CreditSettingForm
from web.views.settings import render_settings_page


def _back_to_credits() -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("web:settings") + "#credits")


def budget_form_for(actor: Actor, data: object = None) -> BudgetForm:
    members, agents = budget_form_choices(actor=actor)
    return BudgetForm(data, members=members, agents=agents)


@require_POST
@page(role=Role.ADMIN)
def credits_grant_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    require_role(actor, Role.OWNER)
    form = CreditGrantForm(request.POST)
    if form.is_valid():
        try:
            entry = credits_grant_by_actor(actor=actor, **form.cleaned_data)
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            messages.success(request, f"{credits_text(entry.amount_micros)} credits added.")
            return _back_to_credits()
    return render_settings_page(request, actor, forms={"grant_form": form}, status=400)


@require_POST
@page(role=Role.ADMIN)
def credits_setting_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    require_role(actor, Role.OWNER)
    form = CreditSettingForm(request.POST)
    if not form.is_valid():
        messages.error(request, "Choose whether credits are on or off.")
        return render_settings_page(request, actor, forms={}, status=400)
    is_enabled = form.cleaned_data["state"] == "on"
    try:
        credits_set_enabled(actor=actor, is_enabled=is_enabled)
    except ValidationError as error:
        messages.error(request, " ".join(error.messages))
        return render_settings_page(request, actor, forms={}, status=400)
    if is_enabled:
        messages.success(request, "Credits are on: model calls are paid from the balance.")
    else:
        messages.success(request, "Credits are off: runs no longer pay from the balance.")
    return _back_to_credits()


@require_POST
@page(role=Role.ADMIN)
def budget_create_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    require_role(actor, Role.OWNER)
    form = budget_form_for(actor, request.POST)
    if form.is_valid():
        data = form.cleaned_data
        try:
            budget_create(
                actor=actor,
                scope=data["scope"],
                monthly_limit=data["monthly_limit"],
                user_id=(data["user"] or None) if data["scope"] == "member" else None,
                agent_id=(data["agent"] or None) if data["scope"] == "agent" else None,
            )
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            messages.success(request, "Budget set.")
            return _back_to_credits()
    return render_settings_page(request, actor, forms={"budget_form": form}, status=400)


@require_POST
@page(role=Role.ADMIN)
def budget_update_view(request: HttpRequest, actor: Actor, budget_id: str) -> HttpResponse:
    require_role(actor, Role.OWNER)
    budget = budget_get_for_actor(actor=actor, budget_id=budget_id)
    form = BudgetLimitForm(request.POST)
    if form.is_valid():
        try:
            budget_update(actor=actor, budget=budget, monthly_limit=form.cleaned_data["monthly_limit"])
        except ValidationError as error:
            return _budget_limit_refused(request, actor, error.messages)
        messages.success(request, "Budget changed.")
        return _back_to_credits()
    return _budget_limit_refused(request, actor, [str(message) for message in form.errors["monthly_limit"]])


def _budget_limit_refused(request: HttpRequest, actor: Actor, reasons: list[str]) -> HttpResponse:
    """The page again, 400, saying why the new limit was refused (the row's form has no error slot)."""
    messages.error(request, "Monthly limit: " + " ".join(reasons))
    return render_settings_page(request, actor, forms={}, status=400)


@require_POST
@page(role=Role.ADMIN)
def budget_delete_view(request: HttpRequest, actor: Actor, budget_id: str) -> HttpResponse:
    require_role(actor, Role.OWNER)
    budget_delete(actor=actor, budget=budget_get_for_actor(actor=actor, budget_id=budget_id))
    messages.success(request, "Budget removed.")
    return _back_to_credits()
