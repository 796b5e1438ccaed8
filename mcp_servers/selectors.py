from uuid import UUID

from django.db.models import QuerySet
from django.http import Http404

from mcp_servers.models import McpServer
from tenants.actors import Actor


def mcp_server_list_for_actor(*, actor: Actor) -> QuerySet[McpServer]:
    return McpServer.objects.filter(tenant=actor.tenant)


def mcp_server_get_for_actor(*, actor: Actor, server_id: UUID | str) -> McpServer:
    """The actor's tenant's server; a missing one and another tenant's one both raise 404."""
    try:
        return McpServer.objects.get(tenant=actor.tenant, pk=UUID(str(server_id)))
    except (McpServer.DoesNotExist, ValueError) as error:
        raise Http404("MCP server not found") from error
