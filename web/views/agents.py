from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect

from agents.models import Agent, ModelProvider
from agents.selectors import agent_get_for_actor
from agents.services import agent_delete
from tenants.actors import Actor
from tenants.models import Role
from web.access import is_htmx, page, render_page
from web.forms.agents import AgentForm
from web.forms.common import apply_service_errors
from web.selectors import agent_detail_for_actor, agent_search_for_actor, agent_tool_settings
from web.services import agent_save_with_tools

STATUS_FILTERS = [("", "Any status"), ("active", "Active"), ("inactive", "Inactive")]


@page()
def agent_list(request: HttpRequest, actor: Actor) -> HttpResponse:
    filters = {
        "query": request.GET.get("q", "").strip(),
        "provider": request.GET.get("provider", ""),
        "status": request.GET.get("status", ""),
    }
    context = {
        "agents": agent_search_for_actor(actor=actor, **filters),
        "filters": filters,
        "providers": ModelProvider.choices,
        "statuses": STATUS_FILTERS,
    }
    template = "web/agents/_results.html" if is_htmx(request) else "web/agents/list.html"
    return render_page(request, actor, template, context)


@page()
def agent_detail(request: HttpRequest, actor: Actor, agent_id: str) -> HttpResponse:
    return render_page(
        request,
        actor,
        "web/agents/detail.html",
        {"detail": agent_detail_for_actor(actor=actor, agent_id=agent_id)},
    )


def _agent_form_page(request: HttpRequest, actor: Actor, agent: Agent | None) -> HttpResponse:
    settings = agent_tool_settings(actor=actor, agent=agent)
    form_scope = {
        "assignable_tools": settings.assignable,
        "tenant_id": actor.tenant.pk,
        "agent_id": agent.pk if agent else None,
    }
    if request.method == "POST":
        form = AgentForm(request.POST, **form_scope)
        if form.is_valid():
            try:
                saved = agent_save_with_tools(
                    actor=actor,
                    agent=agent,
                    fields=form.agent_fields(),
                    tool_profile=form.cleaned_data["tool_profile"],
                    assigned_tools=list(form.cleaned_data["tools"]),
                )
            except ValidationError as error:
                apply_service_errors(form, error)
            else:
                verb = "created" if agent is None else "saved"
                messages.success(request, f"Agent “{saved.name}” {verb}.")
                return redirect("web:agent-detail", agent_id=saved.pk)
        status = 400
    else:
        initial = AgentForm.initial_for(agent, policy=settings.policy, assigned=settings.assigned)
        form = AgentForm(initial=initial, **form_scope)
        status = 200
    context = {"form": form, "agent": agent, "approvals": settings.approvals}
    return render_page(request, actor, "web/agents/form.html", context, status=status)


@page(role=Role.ADMIN)
def agent_create(request: HttpRequest, actor: Actor) -> HttpResponse:
    return _agent_form_page(request, actor, None)


@page(role=Role.ADMIN)
def agent_edit(request: HttpRequest, actor: Actor, agent_id: str) -> HttpResponse:
    return _agent_form_page(request, actor, agent_get_for_actor(actor=actor, agent_id=agent_id))


@page(role=Role.ADMIN)
def agent_delete_view(request: HttpRequest, actor: Actor, agent_id: str) -> HttpResponse:
    agent = agent_get_for_actor(actor=actor, agent_id=agent_id)
    if request.method != "POST":
        return render_page(request, actor, "web/agents/delete.html", {"agent": agent})
    name = agent.name
    agent_delete(agent=agent)
    messages.success(request, f"Agent “{name}” deleted, with its sessions and memories.")
    return redirect("web:agents")
