"""Pages resolve who is asking once: the signed-in user's actor in their active tenant.

``page`` wraps every page view: it sends anonymous visitors to the sign-in page, refuses
users without a tenant or with too small a role, refuses parameters no field accepts (a NUL,
which PostgreSQL refuses even in a search) with a 400, and renders the site's own 403 and 404
pages for refusals and for objects that are missing or belong to another tenant.
"""

from collections.abc import Callable
from functools import wraps
from typing import Any, Concatenate, ParamSpec

from django.contrib.auth.views import redirect_to_login
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from core.storable import UNSTORABLE
from tenants.actors import Actor, actor_from_request
from tenants.models import Role

P = ParamSpec("P")
PageView = Callable[Concatenate[HttpRequest, Actor, P], HttpResponse]


def render_page(
    request: HttpRequest,
    actor: Actor | None,
    template: str,
    context: dict[str, Any] | None = None,
    *,
    status: int = 200,
) -> HttpResponse:
    return render(request, template, {"actor": actor, **(context or {})}, status=status)


def render_error(request: HttpRequest, status: int, message: str = "") -> HttpResponse:
    actor = actor_from_request(request) if request.user.is_authenticated else None
    return render_page(request, actor, f"{status}.html", {"message": message}, status=status)


def page(*, role: str = Role.VIEWER) -> Callable[[PageView[P]], Callable[..., HttpResponse]]:
    """Require a signed-in member of the active tenant with at least ``role``."""

    def decorate(view: PageView[P]) -> Callable[..., HttpResponse]:
        @wraps(view)
        def wrapped(request: HttpRequest, *args: P.args, **kwargs: P.kwargs) -> HttpResponse:
            if not request.user.is_authenticated:
                return redirect_to_login(request.get_full_path())
            actor = actor_from_request(request)
            if actor is None:
                return render_page(request, None, "web/no_tenant.html", status=403)
            if has_unstorable_parameter(request):
                return render_error(request, 400, UNSTORABLE_PARAMETER)
            try:
                if not actor.can(role):
                    raise PermissionDenied(f"This page needs the {role} role or higher.")
                return view(request, actor, *args, **kwargs)
            except Http404:
                return render_error(request, 404)
            except PermissionDenied as refusal:
                return render_error(request, 403, str(refusal))

        return wrapped

    return decorate


UNSTORABLE_PARAMETER = "The request holds a null character, which no field accepts."


def has_unstorable_parameter(request: HttpRequest) -> bool:
    return any(
        UNSTORABLE.search(text)
        for parameters in (request.GET, request.POST)
        for name, values in parameters.lists()
        for text in (name, *values)
    )


def require_role(actor: Actor, role: str) -> None:
    """For actions inside a page that anyone in the tenant may read."""
    if not actor.can(role):
        raise PermissionDenied(f"Your role ({actor.role}) does not allow this action.")


def is_htmx(request: HttpRequest) -> bool:
    return request.headers.get("HX-Request") == "true"


def wants_json(request: HttpRequest) -> bool:
    return "application/json" in request.headers.get("Accept", "")
