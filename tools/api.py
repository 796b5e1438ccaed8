from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents.selectors import agent_get_for_actor
from core.api.schema import AGENT_IN_PATH
from core.api.viewsets import TenantScopedViewSet
from tools.agent_tools import agent_tools_overview
from tools.models import Tool
from tools.selectors import tenant_tools_by_ids, tool_list_for_actor
from tools.serializers import (
    AgentToolsSerializer,
    AgentToolsUpdateSerializer,
    HttpToolWriteSerializer,
    ToolSerializer,
    ToolUpdateSerializer,
)
from tools.services import agent_tools_update, http_tool_create, tool_delete, tool_update


@extend_schema_view(
    list=extend_schema(summary="List tools: built-ins and this tenant's", tags=["tools"]),
    retrieve=extend_schema(summary="Read a tool", tags=["tools"]),
    create=extend_schema(
        summary="Create an HTTP tool",
        tags=["tools"],
        request=HttpToolWriteSerializer,
        responses={201: ToolSerializer},
    ),
    partial_update=extend_schema(
        summary="Update a tenant tool (built-ins are read-only)",
        tags=["tools"],
        request=ToolUpdateSerializer,
        responses=ToolSerializer,
    ),
    destroy=extend_schema(summary="Delete an HTTP tool", tags=["tools"]),
)
class ToolViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = Tool.objects.none()
    serializer_class = ToolSerializer
    filterset_fields = ["kind", "group", "is_enabled"]
    search_fields = ["name", "description"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> QuerySet[Tool]:
        return tool_list_for_actor(actor=self.actor)

    def create(self, request: Request) -> Response:
        serializer = HttpToolWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        tool = http_tool_create(actor=self.actor, **serializer.validated_data)
        return Response(ToolSerializer(tool).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        tool = self.get_object()
        serializer = ToolUpdateSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        tool = tool_update(actor=self.actor, tool=tool, **serializer.validated_data)
        return Response(ToolSerializer(tool).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        tool_delete(tool=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)


class AgentToolsViewSet(TenantScopedViewSet):
    """``/api/v1/agents/{id}/tools/``: the agent's policy, assignments and what it may call."""

    serializer_class = AgentToolsSerializer

    @extend_schema(
        summary="The agent's tools and policy",
        tags=["tools"],
        parameters=[AGENT_IN_PATH],
        responses=AgentToolsSerializer,
    )
    def retrieve(self, request: Request, agent_pk: str) -> Response:
        agent = agent_get_for_actor(actor=self.actor, agent_id=agent_pk)
        return Response(AgentToolsSerializer(agent_tools_overview(agent=agent, actor=self.actor)).data)

    @extend_schema(
        summary="Change the agent's policy and assigned tools",
        tags=["tools"],
        parameters=[AGENT_IN_PATH],
        request=AgentToolsUpdateSerializer,
        responses=AgentToolsSerializer,
    )
    def partial_update(self, request: Request, agent_pk: str) -> Response:
        agent = agent_get_for_actor(actor=self.actor, agent_id=agent_pk)
        serializer = AgentToolsUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        assigned_ids = serializer.validated_data.get("assigned_tools")
        assigned = (
            tenant_tools_by_ids(actor=self.actor, tool_ids=assigned_ids) if assigned_ids is not None else None
        )
        agent_tools_update(
            actor=self.actor, agent=agent, policy_fields=serializer.policy_fields(), assigned_tools=assigned
        )
        return Response(AgentToolsSerializer(agent_tools_overview(agent=agent, actor=self.actor)).data)
