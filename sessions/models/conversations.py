"""Conversations: sessions and their messages, as a tree of branches (DESIGN.md section 2)."""

import uuid

from django.conf import settings
from django.db import models

from agents.models import Agent
from tenants.models import Tenant


class Session(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    # db_index=False where a composite index leads with the column: a second index on it
    # would only cost every insert (events are written many times per message).
    tenant = models.ForeignKey(  # indexed by session_tenant_updated
        Tenant, on_delete=models.CASCADE, related_name="sessions", db_index=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.CASCADE, related_name="sessions")
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    title = models.CharField(max_length=200, blank=True)
    # Counters advanced under the session row's lock (see sessions.sequences):
    # the session row is the lock that keeps event and message numbers gap-free and ordered.
    last_event_seq = models.BigIntegerField(default=0)
    last_message_position = models.BigIntegerField(default=0)
    # The branch people see (sessions.branches): the path through this message, continued by
    # its newest replies. None: the newest branch.
    shown_message = models.ForeignKey(
        "Message", on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-updated_at"]
        indexes = [models.Index(fields=["tenant", "-updated_at"], name="session_tenant_updated")]

    def __str__(self) -> str:
        return self.title or f"session {self.pk}"


class MessageRole(models.TextChoices):
    USER = "user", "User"
    ASSISTANT = "assistant", "Assistant"
    TOOL = "tool", "Tool results"
    SYSTEM = "system", "System"


class Message(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    session = models.ForeignKey(  # indexed by message_unique_position
        Session, on_delete=models.CASCADE, related_name="messages", db_index=False
    )
    # None while its run waits in the lane; set when the run starts.
    position = models.BigIntegerField(null=True, blank=True)
    # The message this one follows in the conversation's tree (sessions.branches); None for a
    # first message. Siblings are branches: regenerated answers, edited messages.
    parent = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="children"
    )
    role = models.CharField(max_length=10, choices=MessageRole.choices)
    # Content blocks as in agents.runtime.types.
    content = models.JSONField(default=list)
    run = models.ForeignKey("Run", on_delete=models.SET_NULL, null=True, blank=True, related_name="messages")
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    # An answer the run stopped (a cancel, its time limit) while it streamed: the text shown so far.
    is_stopped = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "position"]
        constraints = [
            models.UniqueConstraint(fields=["session", "position"], name="message_unique_position")
        ]

    def __str__(self) -> str:
        return f"{self.role} #{self.position}"

    @property
    def text(self) -> str:
        return "".join(block.get("text", "") for block in self.content if block.get("type") == "text")
