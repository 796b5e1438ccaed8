from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.costs import calls_cost, run_cost, run_tree_cost, step_cost
from core.api.serializers import FieldsBuiltOnce, StrictSerializer, not_blank
from files.artifacts import artifact_data, artifacts_by_message
from files.citations import citations_for_text, cited_in
from files.models import FilePurpose
from files.serializers import ArtifactSerializer
from sessions.branches import message_branch_info
from sessions.events import event_envelope
from sessions.models import (
    Message,
    MessageRole,
    Run,
    RunEvent,
    RunRoute,
    Session,
    Step,
    StopReason,
    ToolApproval,
    UserQuestion,
)

# The most files one message carries.
MAX_ATTACHMENTS = 10


def _lane(session: Session) -> list[Run]:
    # Filled by the selector's prefetch: the session's active and queued runs, oldest first.
    return list(getattr(session, "lane_runs", []))


class SessionLaneMixin:
    def get_status(self, session: Session) -> str:
        """idle, queued, running, awaiting_approval or awaiting_input: what the lane is doing now."""
        lane = _lane(session)
        active = [run for run in lane if run.status != "queued"]
        if active:
            waiting = active[0].status in ("awaiting_approval", "awaiting_input")
            return active[0].status if waiting else "running"
        return "queued" if lane else "idle"

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


class CitationSerializer(serializers.Serializer):
    number = serializers.IntegerField()
    file_id = serializers.UUIDField()
    document = serializers.CharField()
    page = serializers.IntegerField(allow_null=True)
    heading = serializers.CharField()
    passage = serializers.CharField()


class MessageSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    run = serializers.UUIDField(source="run_id", read_only=True, allow_null=True)
    text = serializers.CharField(read_only=True)
    is_queued = serializers.SerializerMethodField()
    # Messages have no such attributes: these fields only describe the values ``to_representation`` adds.
    citations = CitationSerializer(
        many=True,
        read_only=True,
        help_text="The passages the answer cites by number ([1], [2]…), from file_search.",
    )
    artifacts = ArtifactSerializer(
        many=True,
        read_only=True,
        help_text="On a run's last assistant message: every file the run's tools made.",
    )
    parent_id = serializers.UUIDField(
        read_only=True, allow_null=True, help_text="The message this one follows; null for a first message."
    )
    branch_index = serializers.IntegerField(
        read_only=True, help_text="Its place among its siblings (the branches at its parent), from 1."
    )
    branch_count = serializers.IntegerField(
        read_only=True, help_text="How many siblings it has, itself included."
    )
    sibling_ids = serializers.ListField(
        child=serializers.UUIDField(),
        read_only=True,
        help_text="Its siblings' ids, oldest first, itself included.",
    )

    class Meta:
        model = Message
        fields = [
            "id",
            "role",
            "content",
            "text",
            "citations",
            "artifacts",
            "parent_id",
            "branch_index",
            "branch_count",
            "sibling_ids",
            "position",
            "is_queued",
            "run",
            "input_tokens",
            "output_tokens",
            "created_at",
        ]
        read_only_fields = fields

    def get_is_queued(self, message: Message) -> bool:
        return message.position is None

    def to_representation(self, instance: Message) -> dict[str, Any]:
        """With the answer's citations and artifacts, from the context when a whole page was read
        (``citations_by_run``, ``artifacts_by_message``), else read for this one message.
        ``FieldsBuiltOnce`` represents the other fields with a serializer of its own, which has no
        context."""
        data = super().to_representation(instance)
        data["citations"] = self._citations(instance)
        data["artifacts"] = self._artifacts(instance)
        data.update(self._branch(instance))
        return data

    def _branch(self, message: Message) -> dict[str, Any]:
        """From the context when a page of a branch was read (``branch_infos``), else read for it."""
        branches = self.context.get("branches", {})
        info = branches[message.pk] if message.pk in branches else message_branch_info(message)
        return {
            "parent_id": str(info.parent_id) if info.parent_id else None,
            "branch_index": info.branch_index,
            "branch_count": info.branch_count,
            "sibling_ids": [str(sibling_id) for sibling_id in info.sibling_ids],
        }

    def _citations(self, message: Message) -> list[dict[str, Any]]:
        if message.role != MessageRole.ASSISTANT or message.run_id is None:
            return []
        if "citations" in self.context:
            return cited_in(message.text, self.context["citations"].get(message.run_id, []))
        return citations_for_text(run_id=message.run_id, text=message.text)

    def _artifacts(self, message: Message) -> list[dict[str, Any]]:
        if message.role != MessageRole.ASSISTANT or message.run_id is None:
            return []
        by_message = (
            self.context["artifacts"] if "artifacts" in self.context else artifacts_by_message([message])
        )
        return list(by_message.get(message.pk, []))


class MessageCreateSerializer(StrictSerializer):
    content = serializers.CharField(
        max_length=100_000,
        trim_whitespace=False,
        error_messages={"blank": "Message cannot be empty."},
        validators=[not_blank("Message cannot be empty.")],
    )
    attachments = serializers.ListField(
        child=serializers.UUIDField(),
        max_length=MAX_ATTACHMENTS,
        required=False,
        default=list,
        help_text="Files uploaded to this session (POST /api/v1/files/) that the message carries.",
    )
    multitask = serializers.ChoiceField(
        choices=["enqueue", "reject", "interrupt"],
        default="enqueue",
        help_text="With a run already active: queue behind it, answer 409, or cancel it and run this one.",
    )
    parent_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        help_text="The message to follow, starting a branch that becomes the one shown (to edit a "
        "message and send it again, its parent; null: a new first message). Absent: the end of "
        "the branch shown.",
    )


class BranchShowSerializer(StrictSerializer):
    message_id = serializers.UUIDField(
        help_text="A message of the branch to show: the path through it, continued by its newest replies."
    )


class ApproveSerializer(StrictSerializer):
    tool_call_id = serializers.CharField(max_length=200)
    decision = serializers.ChoiceField(choices=["approve", "deny"])
    reason = serializers.CharField(max_length=1000, required=False, allow_blank=True, default="")
    arguments = serializers.DictField(
        required=False,
        help_text="The call's arguments as the approver edited them; only for tools whose policy allows it.",
    )


class ToolApprovalSerializer(serializers.ModelSerializer):
    decided_by = serializers.EmailField(source="decided_by.email", read_only=True, default=None)

    class Meta:
        model = ToolApproval
        fields = [
            "id",
            "tool_call_id",
            "tool_name",
            "arguments",
            "arguments_editable",
            "edited_arguments",
            "status",
            "decision",
            "reason",
            "decided_by",
            "decided_at",
            "expires_at",
            "created_at",
        ]
        read_only_fields = fields


class AnswerSerializer(StrictSerializer):
    tool_call_id = serializers.CharField(max_length=200)
    # Kept exactly as typed (no trimming): the model receives this text as the tool's result.
    answer = serializers.CharField(max_length=10_000, trim_whitespace=False)


class UserQuestionSerializer(serializers.ModelSerializer):
    answered_by = serializers.EmailField(source="answered_by.email", read_only=True, default=None)

    class Meta:
        model = UserQuestion
        fields = [
            "id",
            "tool_call_id",
            "question",
            "choices",
            "status",
            "answer",
            "answered_by",
            "answered_at",
            "expires_at",
            "created_at",
        ]
        read_only_fields = fields


class StepSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    cost = serializers.SerializerMethodField(
        help_text="A model call's cost in credits, six places; null when its price is unknown "
        "and for steps that are no model call."
    )

    class Meta:
        model = Step
        fields = [
            "id",
            "index",
            "kind",
            "status",
            "tool_call_id",
            "input",
            "output",
            "error",
            "input_tokens",
            "output_tokens",
            "cache_read_tokens",
            "cache_write_tokens",
            "cost",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_cost(self, step: Step) -> str | None:
        cost = step_cost(step)
        return cost.text if cost is not None else None


class UsageSerializer(serializers.Serializer):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class RunSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    session = serializers.UUIDField(source="session_id", read_only=True)
    agent = serializers.UUIDField(source="agent_id", read_only=True, allow_null=True)
    user_message = serializers.UUIDField(source="user_message_id", read_only=True, allow_null=True)
    parent_run = serializers.UUIDField(source="parent_run_id", read_only=True, allow_null=True)
    retry_of = serializers.UUIDField(source="retry_of_id", read_only=True, allow_null=True)
    # Empty while the run has no stop reason, and for a run its own loop answered (no route).
    stop_reason = serializers.ChoiceField(choices=StopReason.choices, allow_blank=True, read_only=True)
    route = serializers.ChoiceField(choices=RunRoute.choices, allow_blank=True, read_only=True)
    usage = UsageSerializer(read_only=True)
    cost = serializers.SerializerMethodField(
        help_text="Credits (US dollars at list prices) of its own priced model calls, six places; "
        "null when every model call had an unknown price."
    )
    tree_cost = serializers.SerializerMethodField(
        help_text="With its executors' and sub-agents': set when a run with children finishes, else null."
    )
    tree_unpriced_model_calls = serializers.SerializerMethodField()
    steps = StepSerializer(many=True, read_only=True)
    approvals = ToolApprovalSerializer(many=True, read_only=True)
    questions = UserQuestionSerializer(many=True, read_only=True, help_text="The run's ask_user questions.")
    artifacts = serializers.SerializerMethodField(help_text="The files the run's tools made, oldest first.")

    class Meta:
        model = Run
        fields = [
            "id",
            "session",
            "agent",
            "user_message",
            "parent_run",
            "parent_tool_call_id",
            "title",
            "retry_of",
            "status",
            "stop_reason",
            "error",
            "attempt",
            "model_calls",
            "usage",
            "cost",
            "unpriced_model_calls",
            "tree_usage",
            "tree_cost",
            "tree_unpriced_model_calls",
            "route",
            "route_reason",
            "agent_config",
            "created_at",
            "started_at",
            "finished_at",
            "steps",
            "approvals",
            "questions",
            "artifacts",
        ]
        read_only_fields = fields

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_cost(self, run: Run) -> str | None:
        return run_cost(run).text

    @extend_schema_field(ArtifactSerializer(many=True))
    def get_artifacts(self, run: Run) -> list[dict[str, Any]]:
        # Prefetched by the run endpoint; filtered here so any other read gets the same answer.
        artifacts = [stored for stored in run.artifacts.all() if stored.purpose == FilePurpose.ARTIFACT]
        return [
            artifact_data(stored) for stored in sorted(artifacts, key=lambda s: (s.created_at, str(s.pk)))
        ]

    @extend_schema_field(serializers.CharField(allow_null=True))
    def get_tree_cost(self, run: Run) -> str | None:
        tree = run_tree_cost(run)
        return tree.text if tree is not None else None

    @extend_schema_field(serializers.IntegerField(allow_null=True))
    def get_tree_unpriced_model_calls(self, run: Run) -> int | None:
        tree = run_tree_cost(run)
        return tree.unpriced_calls if tree is not None else None


class RunSummarySerializer(RunSerializer):
    class Meta(RunSerializer.Meta):
        fields = [
            name
            for name in RunSerializer.Meta.fields
            if name not in ("steps", "agent_config", "approvals", "questions", "artifacts")
        ]
        read_only_fields = fields


class PostMessageResponseSerializer(serializers.Serializer):
    message = MessageSerializer()
    run = RunSummarySerializer()


class RunEventSerializer(serializers.Serializer):
    """The event envelope of DESIGN.md §4."""

    seq = serializers.IntegerField()
    session_id = serializers.UUIDField()
    run_id = serializers.UUIDField(allow_null=True)
    type = serializers.CharField()
    ts = serializers.CharField()
    data = serializers.DictField()  # type: ignore[assignment]  # the envelope's field, not Serializer.data

    def to_representation(self, instance: RunEvent) -> dict[str, Any]:
        return event_envelope(instance)
