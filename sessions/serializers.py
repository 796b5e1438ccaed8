from typing import Any

from rest_framework import serializers

from core.api.serializers import StrictSerializer
from sessions.events import event_envelope
from sessions.models import Message, Run, RunEvent, Session, Step


class SessionSerializer(serializers.ModelSerializer):
    agent = serializers.UUIDField(source="agent_id", read_only=True)
    agent_name = serializers.CharField(source="agent.name", read_only=True)
    created_by = serializers.EmailField(source="created_by.email", read_only=True, default=None)
    queued_runs = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = Session
        fields = ["id", "agent", "agent_name", "title", "created_by", "queued_runs", "last_event_seq",
                  "created_at", "updated_at"]
        read_only_fields = fields


class SessionCreateSerializer(StrictSerializer):
    agent = serializers.UUIDField()
    title = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")


class MessageSerializer(serializers.ModelSerializer):
    run = serializers.UUIDField(source="run_id", read_only=True, allow_null=True)
    text = serializers.CharField(read_only=True)
    is_queued = serializers.SerializerMethodField()

    class Meta:
        model = Message
        fields = ["id", "role", "content", "text", "position", "is_queued", "run", "input_tokens",
                  "output_tokens", "created_at"]
        read_only_fields = fields

    def get_is_queued(self, message: Message) -> bool:
        return message.position is None


class MessageCreateSerializer(StrictSerializer):
    content = serializers.CharField(max_length=100_000, allow_blank=True, trim_whitespace=False)


class StepSerializer(serializers.ModelSerializer):
    class Meta:
        model = Step
        fields = ["id", "index", "kind", "status", "tool_call_id", "input", "output", "error", "input_tokens",
                  "output_tokens", "cache_read_tokens", "cache_write_tokens", "started_at", "finished_at"]
        read_only_fields = fields


class UsageSerializer(serializers.Serializer):
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    cache_read_tokens = serializers.IntegerField()
    cache_write_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()


class RunSerializer(serializers.ModelSerializer):
    session = serializers.UUIDField(source="session_id", read_only=True)
    agent = serializers.UUIDField(source="agent_id", read_only=True, allow_null=True)
    user_message = serializers.UUIDField(source="user_message_id", read_only=True, allow_null=True)
    parent_run = serializers.UUIDField(source="parent_run_id", read_only=True, allow_null=True)
    usage = UsageSerializer(read_only=True)
    steps = StepSerializer(many=True, read_only=True)

    class Meta:
        model = Run
        fields = ["id", "session", "agent", "user_message", "parent_run", "status", "stop_reason", "error",
                  "attempt", "model_calls", "usage", "agent_config", "created_at", "started_at", "finished_at",
                  "steps"]
        read_only_fields = fields


class RunSummarySerializer(RunSerializer):
    class Meta(RunSerializer.Meta):
        fields = [name for name in RunSerializer.Meta.fields if name not in ("steps", "agent_config")]
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
    data = serializers.DictField()

    def to_representation(self, instance: RunEvent) -> dict[str, Any]:
        return event_envelope(instance)
