from typing import Any

from rest_framework import serializers

from core.api.serializers import StrictModelSerializer, StrictSerializer
from files.models import KnowledgeBase, KnowledgeDocument, StoredFile


class StoredFileSerializer(serializers.ModelSerializer):
    session = serializers.UUIDField(source="session_id", read_only=True, allow_null=True)
    run = serializers.UUIDField(
        source="run_id", read_only=True, allow_null=True, help_text="The run that made an artifact."
    )
    knowledge_base = serializers.SerializerMethodField()
    download_url = serializers.SerializerMethodField(help_text="Needs the same credentials as this API.")

    class Meta:
        model = StoredFile
        fields = [
            "id",
            "name",
            "purpose",
            "content_type",
            "size",
            "sha256",
            "status",
            "status_reason",
            "page_count",
            "character_count",
            "chunk_count",
            "width",
            "height",
            "session",
            "run",
            "tool_call_id",
            "knowledge_base",
            "download_url",
            "created_at",
            "processed_at",
        ]
        read_only_fields = fields

    def get_knowledge_base(self, stored: StoredFile) -> str | None:
        try:
            return str(stored.knowledge_document.knowledge_base_id)
        except KnowledgeDocument.DoesNotExist:
            return None

    def get_download_url(self, stored: StoredFile) -> str:
        return f"/api/v1/files/{stored.pk}/download/"


class FileUploadSerializer(StrictSerializer):
    file = serializers.FileField(allow_empty_file=True, help_text="The file (multipart/form-data).")
    session = serializers.UUIDField(help_text="The session the file is attached to.")


class DocumentUploadSerializer(StrictSerializer):
    file = serializers.FileField(allow_empty_file=True, help_text="The document (multipart/form-data).")


class KnowledgeDocumentSerializer(serializers.ModelSerializer):
    file = StoredFileSerializer(read_only=True)

    class Meta:
        model = KnowledgeDocument
        fields = ["id", "file", "created_at"]
        read_only_fields = fields


class KnowledgeBaseSerializer(StrictModelSerializer):
    agent_ids = serializers.ListField(
        child=serializers.UUIDField(), required=False, max_length=1000, help_text="Agents that search it."
    )
    document_count = serializers.IntegerField(read_only=True, default=0)

    class Meta:
        model = KnowledgeBase
        fields = ["id", "name", "description", "agent_ids", "document_count", "created_at", "updated_at"]
        read_only_fields = ["id", "document_count", "created_at", "updated_at"]

    def to_representation(self, instance: KnowledgeBase) -> dict[str, Any]:
        data = super().to_representation(instance)
        data["agent_ids"] = sorted(str(agent.pk) for agent in instance.agents.all())
        return data


class SearchQuerySerializer(serializers.Serializer):
    """Query parameters (strings, as a URL carries them)."""

    q = serializers.CharField(min_length=1, max_length=1000, help_text="What to look for.")
    limit = serializers.IntegerField(min_value=1, max_value=20, default=5)


class PassageSerializer(serializers.Serializer):
    chunk_id = serializers.IntegerField()
    file_id = serializers.UUIDField()
    document = serializers.CharField()
    page = serializers.IntegerField(allow_null=True)
    heading = serializers.CharField()
    text = serializers.CharField()
    score = serializers.FloatField()


class ArtifactSerializer(serializers.Serializer):
    """A file a tool made during a run (``files.artifacts.artifact_data``)."""

    file_id = serializers.UUIDField()
    name = serializers.CharField()
    content_type = serializers.CharField()
    size = serializers.IntegerField()
    download_url = serializers.CharField(help_text="Needs the same credentials as this API.")


class FilePreviewSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["image", "csv", "text", "none"],
        help_text="image: show the download inline; none: nothing to preview, download only.",
    )
    rows = serializers.ListField(
        child=serializers.ListField(child=serializers.CharField(allow_blank=True)),
        help_text="A CSV's first rows (at most 10, 20 columns, 200 characters a cell).",
    )
    text = serializers.CharField(allow_blank=True, help_text="A text's first 2,000 characters.")
    is_truncated = serializers.BooleanField(help_text="The file holds more than the preview shows.")
