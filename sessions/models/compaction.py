"""Compaction snapshots: the summary later runs start their context from."""

import uuid

from django.db import models

from sessions.models.conversations import Session
from sessions.models.runs import Run
from tenants.models import Tenant


class CompactionReason(models.TextChoices):
    THRESHOLD = "threshold"
    OVERFLOW = "overflow"
    MANUAL = "manual"


class CompactionSnapshot(models.Model):
    """One compaction of a session's context: the summary and the sizes before and after.

    The stored messages stay (people see the whole conversation); the model's context for later
    runs starts from the latest snapshot: its summary, then the messages after
    ``replaces_up_to_position``. None there means the snapshot is a record only (its kept messages
    could not be matched to stored ones) and does not change the context.
    """

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="compactions")
    # None for a manual compaction, which runs outside any run.
    run = models.ForeignKey(Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="compactions")
    reason = models.CharField(max_length=10, choices=CompactionReason.choices)
    # Empty when summarizing failed and the oldest turns were dropped instead (is_fallback).
    summary = models.TextField(blank=True)
    is_fallback = models.BooleanField(default=False)
    replaces_up_to_position = models.BigIntegerField(null=True, blank=True)
    tokens_before = models.PositiveIntegerField()
    tokens_after = models.PositiveIntegerField()
    messages_before = models.PositiveIntegerField()
    messages_after = models.PositiveIntegerField()
    # Tokens the compaction's own model calls (summary, memory flush) spent.
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "created_at"]
        indexes = [models.Index(fields=["session", "-created_at"], name="compaction_session_latest")]

    def __str__(self) -> str:
        return f"compaction of {self.session_id} ({self.reason})"
