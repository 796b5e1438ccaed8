from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.filters import StrictFilterSet
from core.api.viewsets import TenantScopedViewSet
from mcp_servers.health import mcp_server_check
from mcp_servers.models import McpServer
from mcp_servers.selectors import mcp_server_list_for_actor
from mcp_servers.serializers import McpServerCheckSerializer, McpServerSerializer
from mcp_servers.services import mcp_server_create, mcp_server_delete, mcp_server_update
from tenants.models import Role


class McpServerFilter(StrictFilterSet):
    class Meta:
        model = McpServer
        fields = ["transport", "health_status", "is_enabled"]


@extend_schema_view(
    list=extend_schema(summary="List MCP servers", tags=["mcp-servers"]),
    retrieve=extend_schema(summary="Read an MCP server", tags=["mcp-servers"]),
    create=extend_schema(summary="Connect an MCP server", tags=["mcp-servers"]),
    partial_update=extend_schema(summary="Update an MCP server", tags=["mcp-servers"]),
    update=extend_schema(summary="Replace an MCP server", tags=["mcp-servers"]),
    destroy=extend_schema(summary="Delete an MCP server and its tools", tags=["mcp-servers"]),
)
class McpServerViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = McpServer.objects.none()
    serializer_class = McpServerSerializer
    filterset_class = McpServerFilter
    search_fields = ["name", "url"]
    ordering_fields = ["name", "health_status", "last_checked_at", "created_at"]
    write_role = Role.ADMIN

    def get_queryset(self) -> QuerySet[McpServer]:
        return mcp_server_list_for_actor(actor=self.actor).prefetch_related("tools")

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        server = mcp_server_create(actor=self.actor, **serializer.validated_data)
        return Response(self.get_serializer(server).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, pk: str | None = None, partial: bool = False) -> Response:
        server = self.get_object()
        serializer = self.get_serializer(server, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        server = mcp_server_update(actor=self.actor, server=server, **serializer.validated_data)
        return Response(self.get_serializer(self._reloaded(server)).data)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self.update(request, pk=pk, partial=True)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        mcp_server_delete(server=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Check an MCP server now",
        description="Connects, initializes, lists the tools, records the health and updates the tool list.",
        tags=["mcp-servers"],
        request=None,
        responses={200: McpServerCheckSerializer},
    )
    @action(detail=True, methods=["post"])
    def check(self, request: Request, pk: str | None = None) -> Response:
        server = self.get_object()
        result = mcp_server_check(server)
        context = {**self.get_serializer_context(), "changes": result.changes}
        serializer = McpServerCheckSerializer(self._reloaded(server), context=context)
        return Response(serializer.data)

    def _reloaded(self, server: McpServer) -> McpServer:
        """The server with a fresh tool list (a rename or check changed it)."""
        return self.get_queryset().get(pk=server.pk)
