from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from agents.selectors import agent_get_for_actor
from tenants.actors import Actor
from tenants.models import Role
from tools.agent_tools import agent_tools_overview
from tools.models import Tool, ToolKind
from tools.selectors import tool_get_for_actor
from tools.services import http_tool_create, tool_delete, tool_update
from web.access import page, render_page, require_role
from web.forms.common import apply_service_errors, join_names
from web.forms.tools import AgentPolicyForm, HttpToolForm
from web.responses import error_text
from web.selectors import agent_tool_settings, tool_catalog_for_actor
from web.services import agent_tool_policy_save


@page()
def tool_list(request: HttpRequest, actor: Actor) -> HttpResponse:
    return render_page(
        request, actor, "web/tools/list.html", {"catalog": tool_catalog_for_actor(actor=actor)}
    )


def _http_tool(actor: Actor, tool_id: str) -> Tool:
    tool = tool_get_for_actor(actor=actor, tool_id=tool_id)
    if tool.kind != ToolKind.HTTP:
        raise Http404("not an HTTP tool")
    return tool


def _http_tool_form_page(request: HttpRequest, actor: Actor, tool: Tool | None) -> HttpResponse:
    if request.method != "POST":
        form = HttpToolForm(initial=HttpToolForm.initial_for(tool) if tool else None)
        return render_page(request, actor, "web/tools/form.html", {"form": form, "tool": tool})
    form = HttpToolForm(request.POST)
    if form.is_valid():
        try:
            if tool is None:
                saved = http_tool_create(actor=actor, **form.tool_fields())
            else:
                saved = tool_update(actor=actor, tool=tool, **form.tool_fields())
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            messages.success(request, f"Tool “{saved.name}” saved.")
            return redirect("web:tools")
    return render_page(request, actor, "web/tools/form.html", {"form": form, "tool": tool}, status=400)


@page(role=Role.ADMIN)
def http_tool_create_view(request: HttpRequest, actor: Actor) -> HttpResponse:
    return _http_tool_form_page(request, actor, None)


@page(role=Role.ADMIN)
def http_tool_edit(request: HttpRequest, actor: Actor, tool_id: str) -> HttpResponse:
    return _http_tool_form_page(request, actor, _http_tool(actor, tool_id))


@require_POST
@page(role=Role.ADMIN)
def http_tool_delete(request: HttpRequest, actor: Actor, tool_id: str) -> HttpResponse:
    tool = _http_tool(actor, tool_id)
    try:
        tool_delete(tool=tool)
    except ValidationError as error:
        messages.error(request, error_text(error))
    else:
        messages.success(request, f"Tool “{tool.name}” deleted.")
    return redirect("web:tools")


@page()
def agent_tools(request: HttpRequest, actor: Actor, agent_id: str) -> HttpResponse:
    """The agent's tool policy and assignments, and what each tool's verdict comes to."""
    agent = agent_get_for_actor(actor=actor, agent_id=agent_id)
    settings = agent_tool_settings(actor=actor, agent=agent)
    status = 200
    if request.method == "POST":
        require_role(actor, Role.ADMIN)
        form = AgentPolicyForm(request.POST, assignable_tools=settings.assignable)
        if form.is_valid():
            try:
                agent_tool_policy_save(
                    actor=actor,
                    agent=agent,
                    policy_fields=form.policy_fields(),
                    assigned_tools=list(form.cleaned_data["assigned_tools"]),
                )
            except ValidationError as error:
                apply_service_errors(form, error)
            else:
                messages.success(request, f"Tool policy of “{agent.name}” saved.")
                return redirect("web:agent-tools", agent_id=agent.pk)
        status = 400
    else:
        initial = AgentPolicyForm.initial_for(settings.policy, settings.assigned)
        # The agent's own approval names show (and are saved) with the policy's: one list to edit.
        initial["require_approval"] = join_names(settings.approvals)
        form = AgentPolicyForm(initial=initial, assignable_tools=settings.assignable)
    context = {"agent": agent, "form": form, "overview": agent_tools_overview(agent=agent, actor=actor)}
    return render_page(request, actor, "web/tools/agent_policy.html", context, status=status)
