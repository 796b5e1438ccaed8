"""``POST /api/v1/sessions/{id}/compact/``: compact a session's context on demand."""

from django.db.models import QuerySet
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agents.model_clients import ProviderNotConfigured
from agents.runtime.types import ModelError
from core.api.errors import error_body
from core.api.schema import ERROR_REFERENCE, SESSION_ID_IN_PATH
from core.api.viewsets import TenantScopedViewSet
from sessions.compaction import NothingToCompact, SessionBusy, session_compact
from sessions.models import CompactionSnapshot, Session
from sessions.selectors import session_list_for_actor
from tenants.models import Role


class CompactionSnapshotSerializer(serializers.ModelSerializer):
    class Meta:
        model = CompactionSnapshot
        fields = [
            "id",
            "session",
            "run",
            "reason",
            "summary",
            "is_fallback",
            "replaces_up_to_position",
            "tokens_before",
            "tokens_after",
            "messages_before",
            "messages_after",
            "input_tokens",
            "output_tokens",
            "created_at",
        ]
        read_only_fields = fields


class SessionCompactionViewSet(TenantScopedViewSet):
    """Route: ``sessions/<str:pk>/compact/`` with ``as_view({"post": "compact"})``."""

    serializer_class = CompactionSnapshotSerializer
    # Members compact their own sessions; the service lets admins and owners compact any.
    write_role = Role.MEMBER

    def get_queryset(self) -> QuerySet[Session]:
        return session_list_for_actor(actor=self.actor)

    @extend_schema(
        summary="Compact the session's context now",
        description=(
            "Summarizes the older turns with the agent's model; later runs start from the summary "
            "and the newest messages. The stored messages stay. 409 while a run of the session is "
            "active or when there is nothing to compact yet."
        ),
        tags=["sessions"],
        parameters=[SESSION_ID_IN_PATH],
        request=None,
        responses={
            200: CompactionSnapshotSerializer,
            409: OpenApiResponse(
                ERROR_REFERENCE,
                description="A run of the session is active (`run_active`), there is nothing to compact "
                "yet (`nothing_to_compact`), or the agent's provider has no key (`provider_not_configured`).",
            ),
            402: OpenApiResponse(
                ERROR_REFERENCE,
                description=(
                    "The summary's model call does not fit the credits or a budget (`insufficient_credits`), "
                    "or its model has no price while the workspace pays in credits (`no_price`)."
                ),
            ),
            502: OpenApiResponse(ERROR_REFERENCE, description="The model could not summarize (`llm_error`)."),
        },
    )
    def compact(self, request: Request, pk: str | None = None) -> Response:
        session = self.get_object()
        try:
            snapshot = session_compact(actor=self.actor, session=session)
        except SessionBusy as busy:
            body = error_body(
                "run_active",
                f"Run {busy.active_run.pk} is active in this session.",
                {"active_run": [str(busy.active_run.pk)]},
            )
            return Response(body, status=status.HTTP_409_CONFLICT)
        except NothingToCompact as nothing:
            return Response(error_body("nothing_to_compact", str(nothing)), status=status.HTTP_409_CONFLICT)
        except ProviderNotConfigured as error:
            body = error_body("provider_not_configured", str(error))
            return Response(body, status=status.HTTP_409_CONFLICT)
        except ModelError as error:
            if error.kind in ("insufficient_credits", "no_price"):
                body = error_body(error.kind, str(error))
                return Response(body, status=status.HTTP_402_PAYMENT_REQUIRED)
            body = error_body("llm_error", f"The model could not summarize the conversation: {error}")
            return Response(body, status=status.HTTP_502_BAD_GATEWAY)
        return Response(CompactionSnapshotSerializer(snapshot).data)
