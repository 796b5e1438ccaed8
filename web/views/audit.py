from django.core.paginator import Paginator
from django.http import HttpRequest, HttpResponse

from audit.selectors import audit_entry_list_for_actor, audit_object_types_for_actor
from tenants.actors import Actor
from tenants.models import Role
from web.access import page, render_page
from web.forms.audit import AuditFilterForm

ENTRIES_PER_PAGE = 50


@page(role=Role.ADMIN)
def audit_list(request: HttpRequest, actor: Actor) -> HttpResponse:
    form = AuditFilterForm(request.GET, object_types=audit_object_types_for_actor(actor=actor))
    if not form.is_valid():
        context = {"form": form, "entries": None}
        return render_page(request, actor, "web/audit/list.html", context, status=400)
    entries = audit_entry_list_for_actor(
        actor=actor,
        user=form.cleaned_data["actor"],
        object_type=form.cleaned_data["object_type"],
        since=form.cleaned_data["since"],
        until=form.cleaned_data["until"],
    )
    entries_page = Paginator(entries, ENTRIES_PER_PAGE).get_page(request.GET.get("page"))
    return render_page(request, actor, "web/audit/list.html", {"form": form, "entries": entries_page})
