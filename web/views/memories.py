from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_POST

from agents.selectors import agent_list_for_actor
from memory.models import MemoryStatus, MemoryType
from memory.selectors import memory_get_for_actor
from memory.services import memory_approve, memory_create, memory_delete, memory_reject, memory_update
from tenants.actors import Actor
from tenants.models import Role
from web.access import is_htmx, page, render_page
from web.forms.common import apply_service_errors
from web.forms.memories import MemoryApproveForm, MemoryEditForm, MemoryForm
from web.responses import error_text, redirect_back, with_toast
from web.selectors import member_users_for_actor, memory_listing_for_actor

MEMORY_FIELD_NAMES = {"subject_user": "subject_user"}


@page()
def memory_list(request: HttpRequest, actor: Actor) -> HttpResponse:
    filters = {
        "agent_id": request.GET.get("agent", ""),
        "type": request.GET.get("type", ""),
        "status": request.GET.get("status", ""),
        "query": request.GET.get("q", "").strip(),
    }
    context = {
        "listing": memory_listing_for_actor(actor=actor, **filters),
        "filters": filters,
        "types": MemoryType.choices,
        "statuses": MemoryStatus.choices,
    }
    template = "web/memories/_results.html" if is_htmx(request) else "web/memories/list.html"
    return render_page(request, actor, template, context)


@page(role=Role.ADMIN)
def memory_create_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    agents = agent_list_for_actor(actor=actor).order_by("name")
    members = member_users_for_actor(actor=actor)
    if request.method != "POST":
        form = MemoryForm(initial={"agent": request.GET.get("agent") or None}, agents=agents, members=members)
        return render_page(request, actor, "web/memories/form.html", {"form": form})
    form = MemoryForm(request.POST, agents=agents, members=members)
    if form.is_valid():
        data = form.cleaned_data
        subject = data["subject_user"]
        try:
            memory = memory_create(
                actor=actor,
                agent=data["agent"],
                content=data["content"],
                type=data["type"],
                importance=data["importance"],
                subject_user_id=subject.pk if subject else None,
            )
        except ValidationError as error:
            apply_service_errors(form, error, MEMORY_FIELD_NAMES)
        else:
            messages.success(request, "Memory added.")
            return redirect(f"{reverse('web:memories')}?agent={memory.agent_id}")
    return render_page(request, actor, "web/memories/form.html", {"form": form}, status=400)


@page(role=Role.ADMIN)
def memory_edit(request: HttpRequest, actor: Actor, memory_id: str) -> HttpResponse:
    memory = memory_get_for_actor(actor=actor, memory_id=memory_id)
    is_review = memory.status == MemoryStatus.SUGGESTED
    if request.method != "POST":
        form = MemoryEditForm(initial=MemoryEditForm.initial_for(memory))
        return render_page(
            request, actor, "web/memories/edit.html", {"form": form, "memory": memory, "is_review": is_review}
        )
    form = MemoryEditForm(request.POST)
    if form.is_valid():
        fields = {name: value for name, value in form.cleaned_data.items() if value not in (None, "")}
        try:
            if is_review:
                fields.pop("status", None)
                memory_approve(actor=actor, memory=memory, **fields)
            else:
                memory_update(actor=actor, memory=memory, **fields)
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            messages.success(request, "Memory approved." if is_review else "Memory saved.")
            return redirect_back(request, reverse("web:memories"))
    context = {"form": form, "memory": memory, "is_review": is_review}
    return render_page(request, actor, "web/memories/edit.html", context, status=400)


def _review_answer(request: HttpRequest, actor: Actor, memory_id: str, message: str) -> HttpResponse:
    if is_htmx(request):
        memory = memory_get_for_actor(actor=actor, memory_id=memory_id)
        return with_toast(render_page(request, actor, "web/memories/_row.html", {"memory": memory}), message)
    return redirect_back(request, reverse("web:memories"), message)


def _review_refused(request: HttpRequest, error: ValidationError) -> HttpResponse:
    if is_htmx(request):
        return with_toast(HttpResponse(status=204), error_text(error), level="error")
    return redirect_back(request, reverse("web:memories"), error_text(error), level="error")


@require_POST
@page(role=Role.ADMIN)
def memory_approve_view(request: HttpRequest, actor: Actor, memory_id: str) -> HttpResponse:
    memory = memory_get_for_actor(actor=actor, memory_id=memory_id)
    form = MemoryApproveForm(request.POST)
    if not form.is_valid():
        return _review_refused(request, ValidationError(form.errors.as_text()))
    try:
        memory_approve(actor=actor, memory=memory, **form.approve_fields())
    except ValidationError as error:
        return _review_refused(request, error)
    return _review_answer(request, actor, memory_id, "Memory approved.")


@require_POST
@page(role=Role.ADMIN)
def memory_reject_view(request: HttpRequest, actor: Actor, memory_id: str) -> HttpResponse:
    try:
        memory_reject(actor=actor, memory=memory_get_for_actor(actor=actor, memory_id=memory_id))
    except ValidationError as error:
        return _review_refused(request, error)
    return _review_answer(request, actor, memory_id, "Suggestion rejected.")


@require_POST
@page(role=Role.ADMIN)
def memory_delete_view(request: HttpRequest, actor: Actor, memory_id: str) -> HttpResponse:
    memory_delete(actor=actor, memory=memory_get_for_actor(actor=actor, memory_id=memory_id))
    if is_htmx(request):
        return with_toast(HttpResponse(""), "Memory deleted.")
    return redirect_back(request, reverse("web:memories"), "Memory deleted.")
