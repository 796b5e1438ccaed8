"""The account page: every member's password, tenants, own API keys and other sessions."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from tenants.actors import Actor
from tenants.services import api_key_revoke
from web.access import page, render_page
from web.forms.account import AccountPasswordForm, SignOutOthersForm
from web.forms.common import apply_service_errors
from web.forms.settings import ApiKeyForm
from web.selectors import account_overview_for_actor, own_api_key_get_for_actor
from web.services import account_password_change, account_sign_out_other_sessions, api_key_create_for_actor


def _account_page(
    request: HttpRequest,
    actor: Actor,
    *,
    password_form: AccountPasswordForm | None = None,
    key_form: ApiKeyForm | None = None,
    sign_out_form: SignOutOthersForm | None = None,
    new_key: str = "",
    status: int = 200,
) -> HttpResponse:
    context = {
        "overview": account_overview_for_actor(actor=actor),
        "password_form": password_form or AccountPasswordForm(actor.user),
        "key_form": key_form or ApiKeyForm(auto_id="key_%s"),
        "sign_out_form": sign_out_form or SignOutOthersForm(auto_id="sign_out_%s"),
        "new_key": new_key,
    }
    return render_page(request, actor, "web/account.html", context, status=status)


@page()
def account_page(request: HttpRequest, actor: Actor) -> HttpResponse:
    return _account_page(request, actor)


@require_POST
@page()
def account_password_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    form = AccountPasswordForm(actor.user, request.POST)
    if not form.is_valid():
        return _account_page(request, actor, password_form=form, status=400)
    account_password_change(request=request, form=form)
    messages.success(request, "Password changed. Other browsers signed in as you are signed out.")
    return redirect("web:account")


@require_POST
@page()
def account_sign_out_others_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    form = SignOutOthersForm(request.POST, auto_id="sign_out_%s")
    if form.is_valid():
        try:
            account_sign_out_other_sessions(
                request=request, user=actor.user, password=form.cleaned_data["password"]
            )
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            messages.success(request, "Signed out of every other browser.")
            return redirect("web:account")
    return _account_page(request, actor, sign_out_form=form, status=400)


@require_POST
@page()
def account_api_key_create_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    form = ApiKeyForm(request.POST, auto_id="key_%s")
    if not form.is_valid():
        return _account_page(request, actor, key_form=form, status=400)
    plaintext = api_key_create_for_actor(
        actor=actor,
        name=form.cleaned_data["name"],
        scope=form.cleaned_data["scope"],
        expires_in_days=form.cleaned_data["expires_in_days"],
    )
    # The plaintext exists only in this response: it is not stored, so it cannot be shown again.
    response = _account_page(request, actor, new_key=plaintext)
    response["Cache-Control"] = "no-store"
    return response


@require_POST
@page()
def account_api_key_revoke_view(request: HttpRequest, actor: Actor, api_key_id: str) -> HttpResponse:
    api_key = api_key_revoke(api_key=own_api_key_get_for_actor(actor=actor, api_key_id=api_key_id))
    messages.success(request, f"API key “{api_key.name}” revoked.")
    return redirect("web:account")
