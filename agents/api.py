from django.db.models import QuerySet
from drf_spectacular.utils import extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import Agent
from agents.selectors import agent_list_for_actor
from agents.serializers import AgentSerializer
from agents.services import agent_create, agent_delete, agent_update
from core.api.filters import StrictFilterSet
from core.api.viewsets import TenantScopedViewSet
from tenants.models import Role


class AgentFilter(StrictFilterSet):
    class Meta:
        model = Agent
        fields = ["model_provider", "is_active"]


@extend_schema_view(
    list=extend_schema(summary="List agents", tags=["agents"]),
    retrieve=extend_schema(summary="Read an agent", tags=["agents"]),
    create=extend_schema(summary="Create an agent", tags=["agents"]),
    partial_update=extend_schema(summary="Update an agent", tags=["agents"]),
    update=extend_schema(summary="Replace an agent", tags=["agents"]),
    destroy=extend_schema(summary="Delete an agent", tags=["agents"]),
)
class AgentViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    TenantScopedViewSet,
):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = Agent.objects.none()
    serializer_class = AgentSerializer
    filterset_class = AgentFilter
    search_fields = ["name", "description", "goal"]
    ordering_fields = ["name", "created_at", "updated_at"]
    write_role = Role.ADMIN

    def get_queryset(self) -> QuerySet[Agent]:
        return agent_list_for_actor(actor=self.actor).select_related("created_by")

    def create(self, request: Request) -> Response:
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = agent_create(actor=self.actor, **serializer.validated_data)
        return Response(self.get_serializer(agent).data, status=status.HTTP_201_CREATED)

    def update(self, request: Request, pk: str | None = None, partial: bool = False) -> Response:
        agent = self.get_object()
        serializer = self.get_serializer(agent, data=request.data, partial=partial)
        serializer.is_valid(raise_exception=True)
        agent = agent_update(agent=agent, **serializer.validated_data)
        return Response(self.get_serializer(agent).data)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        return self.update(request, pk=pk, partial=True)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        agent_delete(agent=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)
