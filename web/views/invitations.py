"""The invitation link: the invitee sets their password, or signs in, and joins the tenant."""

from django.contrib import messages
from django.contrib.auth import login
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from tenants.actors import Actor
from tenants.invitations import (
    OpenedInvitation,
    invitation_accept_as_user,
    invitation_accept_with_new_account,
    invitation_open,
)
from tenants.models import Membership
from tenants.services import active_tenant_set
from web.access import render_error, render_page
from web.forms.account import InvitationPasswordForm
from web.forms.common import apply_service_errors


@require_http_methods(["GET", "POST"])
def invitation_view(request: HttpRequest, token: str) -> HttpResponse:
    try:
        opened = invitation_open(token=token)
    except Http404:
        return _invalid(request)
    invitation = opened.invitation
    form = None
    if request.user.is_authenticated:
        if request.method == "POST":
            try:
                membership = invitation_accept_as_user(invitation=invitation, user=request.user)
            except PermissionDenied as refusal:
                return _private(render_error(request, 403, str(refusal)))
            except Http404:
                return _invalid(request)
            return _joined(request, membership)
    elif not opened.has_account:
        form = InvitationPasswordForm(
            User(username=invitation.email, email=invitation.email),
            request.POST if request.method == "POST" else None,
        )
        if request.method == "POST" and form.is_valid():
            try:
                membership = invitation_accept_with_new_account(
                    invitation=invitation, password=form.cleaned_data["new_password1"]
                )
            except ValidationError as error:
                apply_service_errors(form, error)
            except Http404:
                return _invalid(request)
            else:
                login(request, membership.user)
                return _joined(request, membership)
    return _page(request, opened, form, status=400 if request.method == "POST" else 200)


def _page(
    request: HttpRequest, opened: OpenedInvitation, form: InvitationPasswordForm | None, *, status: int
) -> HttpResponse:
    user = request.user
    context = {
        "invitation": opened.invitation,
        "has_account": opened.has_account,
        "form": form,
        "is_invitee": user.is_authenticated and user.get_username() == opened.invitation.email,
    }
    return _private(render_page(request, None, "web/invitation.html", context, status=status))


def _joined(request: HttpRequest, membership: Membership) -> HttpResponse:
    active_tenant_set(
        request=request, actor=Actor(user=membership.user, tenant=membership.tenant, role=membership.role)
    )
    messages.success(request, f"Welcome to {membership.tenant.name}: you joined as {membership.role}.")
    return redirect("web:dashboard")


def _invalid(request: HttpRequest) -> HttpResponse:
    """One answer for unknown, used, revoked and expired links."""
    return _private(render_page(request, None, "web/invitation_invalid.html", status=404))


def _private(response: HttpResponse) -> HttpResponse:
    # The page's URL holds the token: keep it out of caches and of other sites' Referer. Not
    # ``no-referrer``: with it Chromium posts the page's own forms with ``Origin: null``, which
    # Django's CSRF check refuses, so nobody could join.
    response["Cache-Control"] = "no-store"
    response["Referrer-Policy"] = "same-origin"
    return response
