"""Memories over the API: an agent's list (with ``?q=`` search) and create, one memory's
read/edit/delete and review, and the on-demand extraction of a session."""

from functools import cached_property

from django.db.models import QuerySet
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from agents.models import Agent
from agents.selectors import agent_get_for_actor
from core.api.filters import StrictFilterSet
from core.api.schema import AGENT_IN_PATH, SESSION_IN_PATH
from core.api.serializers import StrictSerializer
from core.api.viewsets import TenantScopedViewSet
from memory.models import Memory, MemorySource, MemoryStatus, MemoryType
from memory.selectors import (
    memory_get_for_actor,
    memory_list_for_actor,
    memory_list_for_agent,
    memory_search_for_agent,
)
from memory.serializers import (
    ExtractionQueuedSerializer,
    MemoryApproveSerializer,
    MemoryCreateSerializer,
    MemorySerializer,
    MemoryUpdateSerializer,
)
from memory.services import memory_approve, memory_create, memory_delete, memory_reject, memory_update
from memory.tasks import memory_extraction_request
from sessions.selectors import session_get_for_actor
from tenants.models import Role

SEARCH_LIMIT = 200
QUERY_PARAMETER = OpenApiParameter(
    "q", OpenApiTypes.STR, description="Search: results come in retrieval order, each with its score."
)


class MemoryFilter(StrictFilterSet):
    type = filters.ChoiceFilter(choices=MemoryType.choices)
    status = filters.ChoiceFilter(choices=MemoryStatus.choices)
    source = filters.ChoiceFilter(choices=MemorySource.choices)
    subject_user = filters.NumberFilter(field_name="subject_user_id")

    class Meta:
        model = Memory
        fields = ["type", "status", "source", "subject_user"]


@extend_schema_view(
    list=extend_schema(
        summary="List or search an agent's memories",
        tags=["memories"],
        parameters=[AGENT_IN_PATH, QUERY_PARAMETER],
    ),
    create=extend_schema(
        summary="Add a memory to an agent",
        tags=["memories"],
        parameters=[AGENT_IN_PATH],
        request=MemoryCreateSerializer,
        responses={201: MemorySerializer},
    ),
)
class AgentMemoryViewSet(mixins.ListModelMixin, TenantScopedViewSet):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = Memory.objects.none()
    serializer_class = MemorySerializer
    filterset_class = MemoryFilter
    search_fields: list[str] = []
    ordering_fields = ["created_at", "updated_at", "importance", "access_count"]
    write_role = Role.ADMIN

    @cached_property
    def agent(self) -> Agent:
        return agent_get_for_actor(actor=self.actor, agent_id=self.kwargs["agent_pk"])

    def get_queryset(self) -> QuerySet[Memory]:
        return memory_list_for_agent(actor=self.actor, agent=self.agent)

    def list(self, request: Request, agent_pk: str | None = None) -> Response:
        query = request.query_params.get("q", "").strip()
        if not query:
            return super().list(request)
        filterset = MemoryFilter(request.query_params, queryset=self.get_queryset())
        if not filterset.is_valid():
            raise ValidationError(filterset.errors)
        chosen = filterset.form.cleaned_data
        subject_user = chosen.get("subject_user")
        results = memory_search_for_agent(
            actor=self.actor,
            agent=self.agent,
            query=query,
            limit=SEARCH_LIMIT,
            statuses=(chosen["status"],) if chosen.get("status") else (),
            types=(chosen["type"],) if chosen.get("type") else (),
            subject_user_id=int(subject_user) if subject_user is not None else None,
        )
        if chosen.get("source"):
            results = [item for item in results if item.memory.source == chosen["source"]]
        page = self.paginate_queryset([item.memory for item in results]) or []
        scores = {item.memory.pk: item.score for item in results}
        return self.get_paginated_response(MemorySerializer(page, many=True, context={"scores": scores}).data)

    def create(self, request: Request, agent_pk: str | None = None) -> Response:
        serializer = MemoryCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        memory = memory_create(
            actor=self.actor, agent=self.agent, subject_user_id=fields.pop("subject_user"), **fields
        )
        memory = memory_get_for_actor(actor=self.actor, memory_id=memory.pk)
        return Response(MemorySerializer(memory).data, status=status.HTTP_201_CREATED)


@extend_schema_view(
    retrieve=extend_schema(summary="Read a memory", tags=["memories"]),
    partial_update=extend_schema(
        summary="Edit, archive or restore a memory",
        tags=["memories"],
        request=MemoryUpdateSerializer,
        responses=MemorySerializer,
    ),
    destroy=extend_schema(summary="Delete a memory for good", tags=["memories"]),
)
class MemoryViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = Memory.objects.none()
    serializer_class = MemorySerializer
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]
    write_role = Role.ADMIN

    def get_queryset(self) -> QuerySet[Memory]:
        return memory_list_for_actor(actor=self.actor)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        memory = self.get_object()
        serializer = MemoryUpdateSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        fields = dict(serializer.validated_data)
        if "subject_user" in fields:
            fields["subject_user_id"] = fields.pop("subject_user")
        memory = memory_update(actor=self.actor, memory=memory, **fields)
        return Response(MemorySerializer(memory_get_for_actor(actor=self.actor, memory_id=memory.pk)).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        memory_delete(actor=self.actor, memory=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="Approve a suggested memory, optionally edited",
        tags=["memories"],
        request=MemoryApproveSerializer,
        responses=MemorySerializer,
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        memory = self.get_object()
        serializer = MemoryApproveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        memory = memory_approve(actor=self.actor, memory=memory, **serializer.validated_data)
        return Response(MemorySerializer(memory_get_for_actor(actor=self.actor, memory_id=memory.pk)).data)

    @extend_schema(
        summary="Reject a suggested memory", tags=["memories"], request=None, responses=MemorySerializer
    )
    @action(detail=True, methods=["post"])
    def reject(self, request: Request, pk: str | None = None) -> Response:
        memory = memory_reject(actor=self.actor, memory=self.get_object())
        return Response(MemorySerializer(memory_get_for_actor(actor=self.actor, memory_id=memory.pk)).data)


class NoFieldsSerializer(StrictSerializer):
    """An empty JSON object: the endpoint takes no input."""


class SessionMemoryExtractionViewSet(TenantScopedViewSet):
    """``POST /api/v1/sessions/{id}/extract-memories/``: members for their own sessions, admins for any."""

    write_role = Role.MEMBER

    @extend_schema(
        summary="Propose memories from the session's conversation (as suggestions)",
        tags=["memories"],
        parameters=[SESSION_IN_PATH],
        request=None,
        responses={202: ExtractionQueuedSerializer},
    )
    def create(self, request: Request, session_pk: str | None = None) -> Response:
        NoFieldsSerializer(data=request.data or {}).is_valid(raise_exception=True)
        session = session_get_for_actor(actor=self.actor, session_id=session_pk or "")
        memory_extraction_request(actor=self.actor, session=session)
        return Response({"session": str(session.pk), "status": "queued"}, status=status.HTTP_202_ACCEPTED)
