"""Sessions as the API shows them, with their lane (the active run and the queue)."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.costs import calls_cost
from core.api.serializers import StrictSerializer, not_blank
from sessions.lane import lane_status
from sessions.models import Run, Session


def _lane(session: Session) -> list[Run]:
    # Filled by the selector's prefetch: the session's active and queued runs, oldest first.
    return list(getattr(session, "lane_runs", []))


class SessionLaneMixin:
    def get_status(self, session: Session) -> str:
        return lane_status(_lane(session))

    def get_active_run(self, session: Session) -> str | None:
        active = [run for run in _lane(session) if run.status != "queued"]
        return str(active[0].pk) if active else None

    def get_queue(self, session: Session) -> list[str]:
        return [str(run.pk) for run in _lane(session) if run.status == "queued"]


class SessionSerializer(SessionLaneMixin, serializers.ModelSerializer):
    agent = serializers.UUIDField(source="agent_id", read_only=True)
    agent_name = serializers.CharField(source="agent.name", read_only=True)
    created_by = serializers.EmailField(source="created_by.email", read_only=True, default=None)
    status = serializers.SerializerMethodField()
    active_run = serializers.SerializerMethodField()
    queue = serializers.SerializerMethodField(help_text="Queued run ids in the order they will run.")

    class Meta:
        model = Session
        fields = [
            "id",
            "agent",
            "agent_name",
            "title",
            "created_by",
            "status",
            "active_run",
            "queue",
            "last_event_seq",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class SessionDetailSerializer(SessionSerializer):
    """A session with what its runs cost (executors and sub-agents included), from the annotations
    of sessions.selectors.session_with_cost."""

    cost = serializers.SerializerMethodField(
        help_text="Credits (US dollars at list prices) of its priced model calls, six places; "
        "null when every model call had an unknown price."
    )
    unpriced_model_calls = serializers.IntegerField(source="total_unpriced_model_calls", read_only=True)

    class Meta(SessionSerializer.Meta):
        fields = [*SessionSerializer.Meta.fields, "cost", "unpriced_model_calls"]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_cost(self, session: Session) -> str | None:
        return calls_cost(
            micros=session.total_cost_micros,  # type: ignore[attr-defined]
            model_calls=session.total_model_calls,  # type: ignore[attr-defined]
            unpriced_model_calls=session.total_unpriced_model_calls,  # type: ignore[attr-defined]
        ).text


class SessionCreateSerializer(StrictSerializer):
    agent = serializers.UUIDField()
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class SessionUpdateSerializer(StrictSerializer):
    # Optional as in any PATCH: an empty body changes nothing.
    title = serializers.CharField(
        max_length=200, required=False, validators=[not_blank("Give the conversation a title.")]
    )
