"""/api/v1/sessions/: conversations, their messages and branches, events and exports."""

from uuid import UUID

from django.db.models import QuerySet
from django.http import HttpResponse
from django_filters import rest_framework as filters
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, serializers, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from agents.selectors import agent_get_for_actor
from core.api.errors import error_body
from core.api.filters import StrictFilterSet
from core.api.schema import ERROR_REFERENCE
from core.api.viewsets import TenantScopedViewSet
from files.artifacts import artifacts_by_message
from files.citations import citations_by_run, citing_run_ids
from sessions.api.events import AFTER_PARAMETER, EventPage, event_page, parse_after
from sessions.branches import SHOWN_BRANCH, branch_infos, messages_in_order, shown_path
from sessions.branching import session_show_branch
from sessions.export import export_file_name, session_as_json, session_as_markdown
from sessions.models import Session
from sessions.selectors import (
    SESSION_QUERY_MAX_LENGTH,
    events_for_session,
    session_get_for_posting,
    session_list_for_actor,
    sessions_matching,
    sessions_with_cost,
)
from sessions.serializers import (
    BranchShowSerializer,
    MessageCreateSerializer,
    MessageSerializer,
    PostMessageResponseSerializer,
    RunSummarySerializer,
    SessionCreateSerializer,
    SessionDetailSerializer,
    SessionSerializer,
    SessionUpdateSerializer,
)
from sessions.services import LaneBusy, session_create, session_delete, session_post_message, session_rename
from tenants.models import Role

LEAF_PARAMETER = OpenApiParameter(
    "leaf",
    {"type": "string", "format": "uuid"},
    description="A message of the branch to list: the path through it, continued by its newest replies.",
)
EXPORT_PARAMETER = OpenApiParameter(
    "as", {"type": "string", "enum": ["markdown", "json"]}, description="The file's kind (default markdown)."
)
# ?as= → how to render the conversation, its content type, its file name's extension.
EXPORTS = {
    "markdown": (session_as_markdown, "text/markdown", "md"),
    "json": (session_as_json, "application/json", "json"),
}
IDEMPOTENCY_KEY_MAX_LENGTH = 200


def idempotency_key(request: Request) -> str | None:
    key = request.headers.get("Idempotency-Key", "").strip()
    if len(key) > IDEMPOTENCY_KEY_MAX_LENGTH:
        raise ValidationError({"idempotency_key": [f"Use at most {IDEMPOTENCY_KEY_MAX_LENGTH} characters."]})
    return key or None


def parse_leaf(request: Request) -> UUID | None:
    """``?leaf=``: a message of the branch to read (the session's shown branch without it)."""
    raw = request.query_params.get("leaf")
    if raw is None:
        return None
    try:
        return UUID(raw)
    except ValueError as error:
        raise ValidationError({"leaf": ["Must be a message id."]}) from error


class SessionFilter(StrictFilterSet):
    # By id, not by a choice among every tenant's agents: an agent of another tenant and one that
    # does not exist both match no session (200, empty), where a model choice told them apart.
    agent = filters.UUIDFilter(field_name="agent_id", help_text="Only this agent's sessions.")
    q = filters.CharFilter(
        method="filter_q",
        max_length=SESSION_QUERY_MAX_LENGTH,
        help_text="Only sessions whose title or message text contains this (any case).",
    )

    class Meta:
        model = Session
        fields = ["agent", "q"]

    def filter_q(self, sessions: QuerySet[Session], name: str, value: str) -> QuerySet[Session]:
        return sessions_matching(sessions, query=value)


@extend_schema_view(
    list=extend_schema(summary="List sessions", tags=["sessions"]),
    retrieve=extend_schema(
        summary="Read a session, with what its runs cost",
        tags=["sessions"],
        responses=SessionDetailSerializer,
    ),
    create=extend_schema(
        summary="Start a session with an agent",
        tags=["sessions"],
        request=SessionCreateSerializer,
        responses={201: SessionSerializer},
    ),
    partial_update=extend_schema(
        summary="Rename a session",
        tags=["sessions"],
        request=SessionUpdateSerializer,
        responses=SessionSerializer,
    ),
    destroy=extend_schema(summary="Delete a session", tags=["sessions"]),
)
class SessionViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, TenantScopedViewSet):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = Session.objects.none()
    serializer_class = SessionSerializer
    search_fields = ["title"]
    ordering_fields = ["created_at", "updated_at"]
    filterset_class = SessionFilter
    # Members chat; the services check that members only touch their own sessions.
    write_role = Role.MEMBER

    def get_queryset(self) -> QuerySet[Session]:
        sessions = session_list_for_actor(actor=self.actor)
        return sessions_with_cost(sessions) if self.action == "retrieve" else sessions

    def get_serializer_class(self) -> type[serializers.BaseSerializer]:
        return SessionDetailSerializer if self.action == "retrieve" else SessionSerializer

    def create(self, request: Request) -> Response:
        serializer = SessionCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        agent = agent_get_for_actor(actor=self.actor, agent_id=serializer.validated_data["agent"])
        session = session_create(actor=self.actor, agent=agent, title=serializer.validated_data["title"])
        session = self.get_queryset().get(pk=session.pk)
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)

    def partial_update(self, request: Request, pk: str | None = None) -> Response:
        session = self.get_object()
        serializer = SessionUpdateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        if "title" in serializer.validated_data:
            session = session_rename(
                actor=self.actor, session=session, title=serializer.validated_data["title"]
            )
        return Response(SessionSerializer(session).data)

    def destroy(self, request: Request, pk: str | None = None) -> Response:
        session_delete(actor=self.actor, session=self.get_object())
        return Response(status=status.HTTP_204_NO_CONTENT)

    @extend_schema(
        summary="List the messages of the branch shown (or of the branch through ?leaf=)",
        tags=["sessions"],
        parameters=[LEAF_PARAMETER],
        responses=MessageSerializer(many=True),
        methods=["GET"],
        filters=False,
    )
    @extend_schema(
        summary="Post a message: stores it and queues a run",
        tags=["sessions"],
        request=MessageCreateSerializer,
        responses={
            202: PostMessageResponseSerializer,
            409: OpenApiResponse(
                ERROR_REFERENCE, description="`multitask: reject` while a run is active (`run_active`)."
            ),
        },
        methods=["POST"],
    )
    @action(detail=True, methods=["get", "post"])
    def messages(self, request: Request, pk: str | None = None) -> Response:
        if request.method == "GET":
            return self._branch_page(request, self.get_object(), through=parse_leaf(request))
        session = session_get_for_posting(actor=self.actor, session_id=pk or "")
        self.check_object_permissions(request, session)
        serializer = MessageCreateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        try:
            posted = session_post_message(
                actor=self.actor,
                session=session,
                content=serializer.validated_data["content"],
                multitask=serializer.validated_data["multitask"],
                idempotency_key=idempotency_key(request),
                attachments=serializer.validated_data["attachments"],
                parent_id=serializer.validated_data.get("parent_id", SHOWN_BRANCH),
            )
        except LaneBusy as busy:
            body = error_body(
                "run_active",
                f"Run {busy.active_run_id} is active in this session.",
                {"active_run": [str(busy.active_run_id)]},
            )
            return Response(body, status=status.HTTP_409_CONFLICT)
        message = MessageSerializer(posted.message, context={"branches": {posted.message.pk: posted.branch}})
        body = {"message": message.data, "run": RunSummarySerializer(posted.run).data}
        return Response(body, status=status.HTTP_202_ACCEPTED)

    def _branch_page(self, request: Request, session: Session, *, through: UUID | None) -> Response:
        """A page of the branch's path, each message with its siblings."""
        tree, path = shown_path(session, through=through)
        if through is not None and through not in tree.nodes:
            raise ValidationError({"leaf": ["No such message in this conversation."]})
        page = messages_in_order(self.paginate_queryset(path) or [])
        context = {
            "citations": citations_by_run(citing_run_ids(page)),
            "artifacts": artifacts_by_message(page),
            "branches": branch_infos(tree, (message.pk for message in page)),
        }
        return self.get_paginated_response(MessageSerializer(page, many=True, context=context).data)

    @extend_schema(
        summary="Show another branch: the path through a message, from now on",
        tags=["sessions"],
        request=BranchShowSerializer,
        responses=MessageSerializer(many=True),
        filters=False,
    )
    @action(detail=True, methods=["post"])
    def branch(self, request: Request, pk: str | None = None) -> Response:
        serializer = BranchShowSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        session = session_show_branch(
            actor=self.actor, session=self.get_object(), message_id=serializer.validated_data["message_id"]
        )
        return self._branch_page(request, session, through=None)

    @extend_schema(
        summary="The session's events after a sequence number",
        tags=["events"],
        parameters=[AFTER_PARAMETER],
        responses=EventPage,
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        return event_page(
            request, events_for_session(session=self.get_object(), after_seq=parse_after(request))
        )

    @extend_schema(
        summary="Export the conversation as Markdown or JSON (a download)",
        tags=["sessions"],
        parameters=[EXPORT_PARAMETER],
        responses={(200, "text/markdown"): OpenApiTypes.STR, (200, "application/json"): OpenApiTypes.OBJECT},
        filters=False,
    )
    @action(detail=True, methods=["get"])
    def export(self, request: Request, pk: str | None = None) -> HttpResponse:
        session = self.get_object()
        kind = request.query_params.get("as", "markdown")
        if kind not in EXPORTS:
            raise ValidationError({"as": ["Choose markdown or json."]})
        render, content_type, extension = EXPORTS[kind]
        response = HttpResponse(render(session), content_type=f"{content_type}; charset=utf-8")
        response["Content-Disposition"] = f'attachment; filename="{export_file_name(session, extension)}"'
        return response
