from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.views.decorators.http import require_POST

from core.api.errors import ServerBusy
from mcp_servers.health import CheckResult, mcp_server_check
from mcp_servers.models import McpHealth, McpServer
from mcp_servers.selectors import mcp_server_get_for_actor, mcp_server_list_for_actor
from mcp_servers.services import mcp_server_delete
from tenants.actors import Actor
from tenants.models import Role
from web.access import is_htmx, page, render_page
from web.forms.common import apply_service_errors
from web.forms.mcp import McpServerForm
from web.responses import with_toast
from web.services import mcp_server_save_and_check


@page()
def mcp_list(request: HttpRequest, actor: Actor) -> HttpResponse:
    servers = mcp_server_list_for_actor(actor=actor).prefetch_related("tools").order_by("name")
    return render_page(request, actor, "web/mcp/list.html", {"servers": servers})


@page()
def mcp_detail(request: HttpRequest, actor: Actor, server_id: str) -> HttpResponse:
    server = mcp_server_get_for_actor(actor=actor, server_id=server_id)
    return render_page(
        request, actor, "web/mcp/detail.html", {"server": server, "tools": server.tools.order_by("name")}
    )


def _mcp_form_page(request: HttpRequest, actor: Actor, server: McpServer | None) -> HttpResponse:
    stored_transport = server.transport if server else ""
    if request.method != "POST":
        initial = McpServerForm.initial_for(server) if server else None
        form = McpServerForm(initial=initial, stored_transport=stored_transport)
        return render_page(request, actor, "web/mcp/form.html", {"form": form, "server": server})
    form = McpServerForm(request.POST, stored_transport=stored_transport)
    if form.is_valid():
        try:
            saved, is_check_put_off = mcp_server_save_and_check(
                actor=actor, server=server, fields=form.server_fields(is_new=server is None)
            )
        except ValidationError as error:
            apply_service_errors(form, error)
        else:
            message = f"MCP server “{saved.name}” saved"
            if is_check_put_off:
                messages.warning(request, f"{message}, not checked yet: {ServerBusy.default_detail}")
            elif saved.health_status == McpHealth.DOWN:
                messages.warning(request, f"{message}, but it is down: {saved.last_error}")
            else:
                messages.success(request, f"{message}; {saved.tools.count()} tools discovered.")
            return redirect("web:mcp-detail", server_id=saved.pk)
    return render_page(request, actor, "web/mcp/form.html", {"form": form, "server": server}, status=400)


@page(role=Role.ADMIN)
def mcp_create(request: HttpRequest, actor: Actor) -> HttpResponse:
    return _mcp_form_page(request, actor, None)


@page(role=Role.ADMIN)
def mcp_edit(request: HttpRequest, actor: Actor, server_id: str) -> HttpResponse:
    return _mcp_form_page(request, actor, mcp_server_get_for_actor(actor=actor, server_id=server_id))


@require_POST
@page(role=Role.ADMIN)
def mcp_check(request: HttpRequest, actor: Actor, server_id: str) -> HttpResponse:
    server = mcp_server_get_for_actor(actor=actor, server_id=server_id)
    try:
        result = mcp_server_check(server)
    except ServerBusy as busy:
        message, level = f"{server.name} was not checked: {busy.detail}", "error"
    else:
        message, level = _check_message(server, result)
    if is_htmx(request):
        response = render_page(request, actor, "web/mcp/_server_row.html", {"server": server})
        return with_toast(response, message, level=level)
    messages.add_message(request, messages.ERROR if level == "error" else messages.SUCCESS, message)
    return redirect("web:mcp-detail", server_id=server.pk)


def _check_message(server: McpServer, result: CheckResult) -> tuple[str, str]:
    if result.health_status == McpHealth.DOWN:
        return f"{server.name} is down: {result.error}", "error"
    return f"{server.name} is {result.health_status}: {len(result.tool_names)} tools.", "success"


@require_POST
@page(role=Role.ADMIN)
def mcp_delete(request: HttpRequest, actor: Actor, server_id: str) -> HttpResponse:
    server = mcp_server_get_for_actor(actor=actor, server_id=server_id)
    name = server.name
    mcp_server_delete(server=server)
    messages.success(request, f"MCP server “{name}” deleted, with its tools.")
    return redirect("web:mcp")
