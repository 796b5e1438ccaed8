"""/api/v1/runs/: a run with its steps, its events, and what people do to it (cancel, retry,
regenerate, approve, answer)."""

from django.db.models import Prefetch, QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.exceptions import ValidationError
from rest_framework.request import Request
from rest_framework.response import Response

from core.api.errors import error_body
from core.api.schema import ERROR_REFERENCE
from core.api.viewsets import TenantScopedViewSet
from files.models import FilePurpose, StoredFile
from sessions.api.events import AFTER_PARAMETER, EventPage, event_page, parse_after
from sessions.branching import AnswerInProgress, message_regenerate
from sessions.cancel import run_cancel
from sessions.decisions import run_answer, run_approve
from sessions.models import Run
from sessions.selectors import events_for_run, run_list_for_actor
from sessions.serializers import (
    AnswerSerializer,
    ApproveSerializer,
    MessageSerializer,
    PostMessageResponseSerializer,
    RunSerializer,
    RunSummarySerializer,
    ToolApprovalSerializer,
    UserQuestionSerializer,
)
from sessions.services import run_retry
from tenants.models import Role


@extend_schema_view(retrieve=extend_schema(summary="Read a run with its steps and usage", tags=["runs"]))
class RunViewSet(mixins.RetrieveModelMixin, TenantScopedViewSet):
    # Read by the schema generator only (the model, the filters); get_queryset scopes requests.
    queryset = Run.objects.none()
    serializer_class = RunSerializer
    required_roles = {
        "cancel": Role.MEMBER,
        "retry": Role.MEMBER,
        "approve": Role.MEMBER,
        "answer": Role.MEMBER,
        "regenerate": Role.MEMBER,
    }

    def get_queryset(self) -> QuerySet[Run]:
        artifacts = StoredFile.objects.filter(purpose=FilePurpose.ARTIFACT).defer("text")
        return run_list_for_actor(actor=self.actor).prefetch_related(
            "steps",
            "approvals__decided_by",
            "questions__answered_by",
            Prefetch("artifacts", queryset=artifacts),
            Prefetch("children", queryset=Run.objects.order_by("created_at", "id")),
        )

    @extend_schema(
        summary="The run's events after a sequence number",
        tags=["events"],
        parameters=[AFTER_PARAMETER],
        responses=EventPage,
    )
    @action(detail=True, methods=["get"])
    def events(self, request: Request, pk: str | None = None) -> Response:
        return event_page(request, events_for_run(run=self.get_object(), after_seq=parse_after(request)))

    @extend_schema(
        summary="Cancel the run", tags=["runs"], request=None, responses={202: RunSummarySerializer}
    )
    @action(detail=True, methods=["post"])
    def cancel(self, request: Request, pk: str | None = None) -> Response:
        run = run_cancel(actor=self.actor, run=self.get_object())
        return Response(RunSummarySerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Retry a failed, cancelled or timed-out run",
        tags=["runs"],
        request=None,
        responses={202: RunSummarySerializer},
    )
    @action(detail=True, methods=["post"])
    def retry(self, request: Request, pk: str | None = None) -> Response:
        run = run_retry(actor=self.actor, run=self.get_object())
        return Response(RunSummarySerializer(run).data, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Regenerate: answer the run's user message again, as a new branch",
        tags=["runs"],
        request=None,
        responses={
            202: PostMessageResponseSerializer,
            409: OpenApiResponse(
                ERROR_REFERENCE, description="A run of that message is still queued or active (`run_active`)."
            ),
        },
    )
    @action(detail=True, methods=["post"])
    def regenerate(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        if run.parent_run_id is not None or run.user_message is None:
            raise ValidationError({"run": ["Only an answer in the conversation can be regenerated."]})
        try:
            message, new_run = message_regenerate(actor=self.actor, message=run.user_message)
        except AnswerInProgress as busy:
            body = error_body(
                "run_active",
                f"Run {busy.run_id} still answers this message: wait for it or cancel it.",
                {"run": [str(busy.run_id)]},
            )
            return Response(body, status=status.HTTP_409_CONFLICT)
        body = {"message": MessageSerializer(message).data, "run": RunSummarySerializer(new_run).data}
        return Response(body, status=status.HTTP_202_ACCEPTED)

    @extend_schema(
        summary="Approve or deny a tool call that waits for approval",
        tags=["runs"],
        request=ApproveSerializer,
        responses={200: ToolApprovalSerializer},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        serializer = ApproveSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        approval = run_approve(actor=self.actor, run=run, **serializer.validated_data)
        return Response(ToolApprovalSerializer(approval).data)

    @extend_schema(
        summary="Answer the question an ask_user tool call asks",
        tags=["runs"],
        request=AnswerSerializer,
        responses={200: UserQuestionSerializer},
    )
    @action(detail=True, methods=["post"])
    def answer(self, request: Request, pk: str | None = None) -> Response:
        run = self.get_object()
        serializer = AnswerSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        question = run_answer(actor=self.actor, run=run, **serializer.validated_data)
        return Response(UserQuestionSerializer(question).data)
