from typing import Any

from rest_framework import serializers

from core.api.serializers import StrictSerializer
from memory.models import MAX_MEMORY_CHARACTERS, Memory, MemoryStatus, MemoryType


class MemorySerializer(serializers.ModelSerializer):
    agent = serializers.UUIDField(source="agent_id", read_only=True)
    subject_user = serializers.IntegerField(source="subject_user_id", read_only=True, allow_null=True)
    subject_user_email = serializers.EmailField(
        source="subject_user.email", read_only=True, default=None, allow_null=True
    )
    source_session = serializers.UUIDField(source="source_session_id", read_only=True, allow_null=True)
    created_by = serializers.EmailField(
        source="created_by.email", read_only=True, default=None, allow_null=True
    )
    reviewed_by = serializers.EmailField(
        source="reviewed_by.email", read_only=True, default=None, allow_null=True
    )
    has_embedding = serializers.SerializerMethodField()
    score = serializers.SerializerMethodField(help_text="Retrieval score for the ?q= search; null otherwise.")

    class Meta:
        model = Memory
        fields = [
            "id",
            "agent",
            "type",
            "content",
            "importance",
            "source",
            "status",
            "subject_user",
            "subject_user_email",
            "source_session",
            "created_by",
            "reviewed_by",
            "reviewed_at",
            "access_count",
            "last_accessed_at",
            "has_embedding",
            "score",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields

    def get_has_embedding(self, memory: Memory) -> bool:
        return bool(memory.embedding_model)

    def get_score(self, memory: Memory) -> float | None:
        scores: dict[Any, float] = self.context.get("scores", {})
        score = scores.get(memory.pk)
        return round(score, 6) if score is not None else None


class MemoryCreateSerializer(StrictSerializer):
    content = serializers.CharField(max_length=MAX_MEMORY_CHARACTERS)
    type = serializers.ChoiceField(choices=MemoryType.choices, default=MemoryType.FACT)
    importance = serializers.FloatField(min_value=0.0, max_value=1.0, default=0.5)
    subject_user = serializers.IntegerField(
        required=False,
        allow_null=True,
        default=None,
        help_text="The user the memory is about (a member's id).",
    )


class MemoryUpdateSerializer(StrictSerializer):
    content = serializers.CharField(max_length=MAX_MEMORY_CHARACTERS, required=False)
    type = serializers.ChoiceField(choices=MemoryType.choices, required=False)
    importance = serializers.FloatField(min_value=0.0, max_value=1.0, required=False)
    status = serializers.ChoiceField(
        choices=[MemoryStatus.ACTIVE, MemoryStatus.ARCHIVED],
        required=False,
        help_text="Archive or restore; suggestions are reviewed with approve and reject.",
    )
    subject_user = serializers.IntegerField(required=False, allow_null=True)


class MemoryApproveSerializer(StrictSerializer):
    content = serializers.CharField(max_length=MAX_MEMORY_CHARACTERS, required=False)
    type = serializers.ChoiceField(choices=MemoryType.choices, required=False)
    importance = serializers.FloatField(min_value=0.0, max_value=1.0, required=False)


class ExtractionQueuedSerializer(serializers.Serializer):
    session = serializers.UUIDField()
    status = serializers.CharField()
