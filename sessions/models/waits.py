"""What a run waits for people on: tool approvals and ask_user questions."""

import uuid

from django.conf import settings
from django.db import models

from sessions.models.runs import Run
from tenants.models import Tenant


class ApprovalStatus(models.TextChoices):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


class ToolApproval(models.Model):
    """A tool call waiting for (or given) a person's decision. The audit of who decided what."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="approvals")
    tool_call_id = models.CharField(max_length=200)
    tool_name = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict)
    # The tool policy lets the approver edit the arguments; edited_arguments holds what they set.
    arguments_editable = models.BooleanField(default=False)
    edited_arguments = models.JSONField(null=True, blank=True)
    status = models.CharField(max_length=10, choices=ApprovalStatus.choices, default=ApprovalStatus.PENDING)
    # What the call was allowed to do: approve or deny (for expired ones, the default applied).
    decision = models.CharField(max_length=10, blank=True)
    reason = models.CharField(max_length=1000, blank=True)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="approval_unique_call_per_run")
        ]
        indexes = [models.Index(fields=["status", "expires_at"], name="approval_status_expiry")]

    def __str__(self) -> str:
        return f"approval of {self.tool_name} ({self.status})"


class QuestionStatus(models.TextChoices):
    PENDING = "pending"
    ANSWERED = "answered"
    EXPIRED = "expired"


class UserQuestion(models.Model):
    """An ask_user call waiting for (or given) the user's answer: the tool's result is the answer."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="questions")
    tool_call_id = models.CharField(max_length=200)
    question = models.TextField()
    # When not empty, the answer must be one of these.
    choices = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=10, choices=QuestionStatus.choices, default=QuestionStatus.PENDING)
    answer = models.TextField(blank=True)
    answered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    answered_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["run", "tool_call_id"], name="question_unique_call_per_run")
        ]
        indexes = [models.Index(fields=["status", "expires_at"], name="question_status_expiry")]

    def __str__(self) -> str:
        return f"question {self.tool_call_id} ({self.status})"
