"""Runs with their steps, approvals, questions and usage; the decisions people send; events."""

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from billing.costs import run_cost, run_tree_cost, step_cost
from core.api.serializers import FieldsBuiltOnce, StrictSerializer
from files.artifacts import artifact_data
from files.models import FilePurpose
from files.serializers import ArtifactSerializer
from sessions.events import event_envelope
from sessions.models import Run, RunEvent, RunRoute, Step, StopReason, ToolApproval, UserQuestion
from sessions.serializers.messages import MessageSerializer


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


class ChildRunSerializer(serializers.ModelSerializer):
    """An executor of a plan or a sub-agent, as its parent run lists it."""

    class Meta:
        model = Run
        fields = ["id", "title", "parent_tool_call_id", "status", "stop_reason", "created_at", "finished_at"]
        read_only_fields = fields


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
    children = ChildRunSerializer(
        many=True,
        read_only=True,
        help_text="Its executors (a plan) and sub-agents, oldest first; each has this run as parent_run.",
    )

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
            "children",
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
            if name not in ("steps", "agent_config", "approvals", "questions", "artifacts", "children")
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
