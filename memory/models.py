"""Long-term memories of an agent, and how far each session has been mined for them.

The full-text index is not a model field: on PostgreSQL it is a generated ``tsvector``
column with a GIN index, on SQLite an FTS5 table kept in sync by triggers (both created
by migration 0002, see ``memory.fulltext``), so every write path keeps it current.
"""

import secrets
import uuid

from django.conf import settings
from django.db import models

from agents.models import Agent
from sessions.models import Session
from tenants.models import Tenant

MAX_MEMORY_CHARACTERS = 4000


def new_search_rowid() -> int:
    """A random positive 62-bit key: the memory's row in SQLite's FTS5 index."""
    return secrets.randbits(62) + 1


class MemoryType(models.TextChoices):
    FACT = "fact", "Fact"
    PREFERENCE = "preference", "Preference"
    CONTEXT = "context", "Context"
    EPISODE = "episode", "Episode"


class MemorySource(models.TextChoices):
    MANUAL = "manual", "Entered by a person"
    AGENT = "agent", "Saved by the agent"
    EXTRACTED = "extracted", "Extracted from a conversation"


class MemoryStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    SUGGESTED = "suggested", "Suggested (awaiting review)"
    REJECTED = "rejected", "Rejected"
    ARCHIVED = "archived", "Archived"


class Memory(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="memories")
    # The end user the memory is about; empty for what the agent knows in general.
    # Memories about a user are only ever retrieved in that user's sessions.
    subject_user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    type = models.CharField(max_length=20, choices=MemoryType.choices, default=MemoryType.FACT)
    content = models.TextField(max_length=MAX_MEMORY_CHARACTERS)
    importance = models.FloatField(default=0.5)
    source = models.CharField(max_length=20, choices=MemorySource.choices, default=MemorySource.MANUAL)
    status = models.CharField(max_length=20, choices=MemoryStatus.choices, default=MemoryStatus.ACTIVE)
    source_session = models.ForeignKey(
        Session, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reviewed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    reviewed_at = models.DateTimeField(null=True, blank=True)
    access_count = models.PositiveIntegerField(default=0)
    last_accessed_at = models.DateTimeField(null=True, blank=True)
    # Unit-length vector from the configured backend; ``embedding_model`` names it, so
    # vectors of another backend or model are never compared with the query's.
    embedding = models.JSONField(null=True, blank=True, editable=False)
    embedding_model = models.CharField(max_length=200, blank=True, editable=False)
    # An explicit column rather than SQLite's implicit rowid, which VACUUM may renumber.
    search_rowid = models.BigIntegerField(unique=True, default=new_search_rowid, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=models.Q(importance__gte=0.0, importance__lte=1.0), name="memory_importance_0_1"
            ),
        ]
        indexes = [
            models.Index(fields=["agent", "status", "subject_user"], name="memory_agent_status_subject"),
            models.Index(fields=["tenant", "-updated_at"], name="memory_tenant_updated"),
        ]
        verbose_name_plural = "memories"

    def __str__(self) -> str:
        return f"{self.type}: {self.content[:60]}"


class ExtractionState(models.Model):
    """How far a session's conversation has been mined for memories, and who is mining it now."""

    session = models.OneToOneField(
        Session, on_delete=models.CASCADE, primary_key=True, related_name="memory_extraction"
    )
    last_message_position = models.BigIntegerField(default=0)
    # A worker's claim while it asks the model: a second task for the session leaves it alone.
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    failed_attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    extracted_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"extraction of {self.session_id} up to #{self.last_message_position}"
