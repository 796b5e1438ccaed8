"""The settings page's provider keys: add or replace, test, delete. Owners and admins only."""

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agents.model_clients import provider_key_check
from core.api.errors import ServerBusy
from tenants.actors import Actor
from tenants.models import Role
from tenants.provider_keys.selectors import provider_key_get_for_actor
from tenants.provider_keys.services import provider_key_delete, provider_key_save
from web.access import page
from web.forms.common import apply_service_errors
from web.forms.provider_keys import ProviderKeyForm
from web.views.settings import render_settings_page


def _back_to_the_keys() -> HttpResponseRedirect:
    return HttpResponseRedirect(reverse("web:settings") + "#provider-keys")


@require_POST
@page(role=Role.ADMIN)
def provider_key_save_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    form = ProviderKeyForm(request.POST)
    if form.is_valid():
        try:
            provider_key = provider_key_save(actor=actor, **form.cleaned_data)
        except ValidationError as error:
            apply_service_errors(form, error)
        except ServerBusy as busy:  # its base URL's name could not be looked up now
            form.add_error(None, f"Not saved: {busy.detail}")
            return render_settings_page(request, actor, forms={"provider_key_form": form}, status=503)
        else:
            messages.success(request, f"{provider_key.get_provider_display()} key saved.")
            return _back_to_the_keys()
    return render_settings_page(request, actor, forms={"provider_key_form": form}, status=400)


@require_POST
@page(role=Role.ADMIN)
def provider_key_test_view(request: HttpRequest, actor: Actor, provider_key_id: str) -> HttpResponse:
    provider_key = provider_key_get_for_actor(actor=actor, provider_key_id=provider_key_id)
    try:
        result = provider_key_check(provider_key=provider_key)
    except ServerBusy as busy:
        messages.error(request, f"{provider_key.get_provider_display()} key not tested: {busy.detail}")
        return _back_to_the_keys()
    report = messages.success if result.is_working else messages.error
    report(request, f"{provider_key.get_provider_display()} key: {result.message}")
    return _back_to_the_keys()


@require_POST
@page(role=Role.ADMIN)
def provider_key_delete_view(request: HttpRequest, actor: Actor, provider_key_id: str) -> HttpResponse:
    provider_key = provider_key_get_for_actor(actor=actor, provider_key_id=provider_key_id)
    provider_key_delete(actor=actor, provider_key=provider_key)
    messages.success(request, f"{provider_key.get_provider_display()} key deleted.")
    return _back_to_the_keys()
