from uuid import UUID

from django.db.models import Q, QuerySet
from django.http import Http404

from tenants.actors import Actor
from tools.models import Tool
from tools.registry import ensure_builtin_tools


def tool_list_for_actor(*, actor: Actor) -> QuerySet[Tool]:
    """Built-ins and the actor's tenant's own tools."""
    ensure_builtin_tools()
    return Tool.objects.filter(Q(tenant__isnull=True) | Q(tenant=actor.tenant)).select_related("mcp_server")


def tool_get_for_actor(*, actor: Actor, tool_id: UUID | str) -> Tool:
    try:
        return tool_list_for_actor(actor=actor).get(pk=UUID(str(tool_id)))
    except (Tool.DoesNotExist, ValueError) as error:
        raise Http404("tool not found") from error


def tenant_tools_by_ids(*, actor: Actor, tool_ids: list[UUID]) -> list[Tool]:
    """The actor's tenant's tools with these ids; any id of another tenant is a 404."""
    tools = list(Tool.objects.filter(tenant=actor.tenant, pk__in=tool_ids))
    if len(tools) != len(set(tool_ids)):
        raise Http404("tool not found")
    return tools
