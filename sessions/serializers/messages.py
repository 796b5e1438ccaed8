"""Messages as the API shows them (citations, artifacts, branches) and as it takes them."""

from typing import Any

from rest_framework import serializers

from core.api.serializers import FieldsBuiltOnce, StrictSerializer, not_blank
from files.artifacts import artifacts_by_message
from files.citations import citations_for_text, cited_in
from files.serializers import ArtifactSerializer
from sessions.branches import message_branch_info
from sessions.models import Message, MessageRole

# The most files one message carries.
MAX_ATTACHMENTS = 10


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
            "is_stopped",
            "input_tokens",
            "output_tokens",
            "created_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "is_stopped": {
                "help_text": "An answer its run stopped (cancelled, timed out) while it streamed: "
                "the text streamed until then, with the tokens it used."
            }
        }

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
