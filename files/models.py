"""Uploaded files, their extracted text as searchable chunks, and knowledge bases.

A file's bytes live in Django's default storage (``settings.STORAGES["default"]``: the data
folder, or an S3-compatible bucket) under a random name; they are only ever served by views
that check the tenant first.

The full-text index of chunks is not a model field: a generated ``tsvector`` column with
a GIN index on PostgreSQL, an FTS5 table kept in sync by triggers on SQLite (migration
0002, ``files.fulltext``). Nor is the pgvector copy of ``Chunk.embedding`` (migration 0003,
``files.vectors``).
"""

import uuid

from django.conf import settings
from django.db import models

from agents.models import Agent
from sessions.models import Session
from tenants.models import Tenant


def blob_name(instance: "StoredFile", filename: str) -> str:
    """Random and per tenant: a name that says nothing and cannot be guessed."""
    return f"tenants/{instance.tenant_id}/{uuid.uuid4().hex}"


class FileStatus(models.TextChoices):
    QUEUED = "queued", "Queued"
    PROCESSING = "processing", "Processing"
    READY = "ready", "Ready"
    FAILED = "failed", "Failed"


class FilePurpose(models.TextChoices):
    ATTACHMENT = "attachment", "Attached to a conversation"
    KNOWLEDGE = "knowledge", "Document of a knowledge base"
    ARTIFACT = "artifact", "Made by a tool during a run"


class StoredFile(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    purpose = models.CharField(max_length=20, choices=FilePurpose.choices)
    # Attachments and artifacts belong to a session and go with it.
    session = models.ForeignKey(
        Session, on_delete=models.CASCADE, null=True, blank=True, related_name="files"
    )
    # An artifact's run, and the tool call (the run's step with this id) that made it.
    run = models.ForeignKey(
        "agent_sessions.Run", on_delete=models.CASCADE, null=True, blank=True, related_name="artifacts"
    )
    tool_call_id = models.CharField(max_length=200, blank=True)
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    name = models.CharField(max_length=255)
    # Detected from the bytes (files.sniffing), never taken from the upload's claim.
    content_type = models.CharField(max_length=100)
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    blob = models.FileField(upload_to=blob_name, max_length=200)
    status = models.CharField(max_length=20, choices=FileStatus.choices, default=FileStatus.QUEUED)
    # Why a file failed, in words a person can act on.
    status_reason = models.CharField(max_length=500, blank=True)
    page_count = models.PositiveIntegerField(null=True, blank=True)
    character_count = models.PositiveIntegerField(default=0)
    chunk_count = models.PositiveIntegerField(default=0)
    # The extracted text with its page or heading marks, as an attachment puts it into a
    # model's context (search reads the chunks). Large: lists defer it.
    text = models.TextField(blank=True)
    width = models.PositiveIntegerField(null=True, blank=True)
    height = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Set when a worker takes the file; one that stays ``processing`` long after is requeued.
    processing_started_at = models.DateTimeField(null=True, blank=True)
    processed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "id"]
        indexes = [
            models.Index(fields=["tenant", "-created_at"], name="file_tenant_created"),
            models.Index(fields=["status", "created_at"], name="file_status_created"),
            # When each tenant's last extraction started: the queue's fair order (files.tasks).
            models.Index(fields=["tenant", "-processing_started_at"], name="file_tenant_started"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def is_image(self) -> bool:
        return self.content_type.startswith("image/")


class KnowledgeBase(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=1000, blank=True)
    # The agents whose runs search this knowledge base through ``file_search``.
    agents = models.ManyToManyField(Agent, blank=True, related_name="knowledge_bases")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="knowledge_base_unique_name_per_tenant")
        ]

    def __str__(self) -> str:
        return self.name


class KnowledgeDocument(models.Model):
    """A file in a knowledge base; deleting the document deletes its file."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    knowledge_base = models.ForeignKey(KnowledgeBase, on_delete=models.CASCADE, related_name="documents")
    file = models.OneToOneField(StoredFile, on_delete=models.CASCADE, related_name="knowledge_document")
    added_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "id"]

    def __str__(self) -> str:
        return f"{self.file_id} in {self.knowledge_base_id}"


class Chunk(models.Model):
    """A passage of a file's text, located by page (PDF) or heading, the unit of search.

    The integer id is also the chunk's row in SQLite's FTS5 index (an INTEGER PRIMARY KEY
    is SQLite's rowid and survives VACUUM).
    """

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+", db_index=False)
    file = models.ForeignKey(StoredFile, on_delete=models.CASCADE, related_name="chunks", db_index=False)
    ordinal = models.PositiveIntegerField()
    text = models.TextField()
    page = models.PositiveIntegerField(null=True, blank=True)
    heading = models.CharField(max_length=300, blank=True)
    # float32 values of a unit-length vector from ``embedding_model`` (empty: none).
    embedding = models.BinaryField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=200, blank=True, editable=False)

    class Meta:
        ordering = ["file", "ordinal"]
        constraints = [models.UniqueConstraint(fields=["file", "ordinal"], name="chunk_unique_ordinal")]
        indexes = [models.Index(fields=["tenant", "file"], name="chunk_tenant_file")]

    def __str__(self) -> str:
        return f"{self.file_id} #{self.ordinal}"


class Citation(models.Model):
    """A passage a run's ``file_search`` returned, numbered per run as the model cites it: [1], [2]…"""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey("agent_sessions.Run", on_delete=models.CASCADE, related_name="citations")
    number = models.PositiveIntegerField()
    chunk = models.ForeignKey(Chunk, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "number"], name="citation_unique_number"),
            models.UniqueConstraint(fields=["run", "chunk"], name="citation_unique_chunk"),
        ]

    def __str__(self) -> str:
        return f"[{self.number}] of {self.run_id}"
