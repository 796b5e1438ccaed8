"""Runs, their steps and events, and what an idempotent post created (DESIGN.md sections 3-4)."""

import uuid

from django.conf import settings
from django.db import models

from agents.models import Agent
from sessions.models.conversations import Message, Session
from tenants.models import Tenant


class RunStatus(models.TextChoices):
    CREATED = "created"
    QUEUED = "queued"
    PLANNING = "planning"
    EXECUTING = "executing"
    AWAITING_APPROVAL = "awaiting_approval"
    AWAITING_INPUT = "awaiting_input"
    CANCELLING = "cancelling"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"


class StopReason(models.TextChoices):
    END_TURN = "end_turn"
    MAX_STEPS = "max_steps"
    MAX_TOKENS = "max_tokens"
    CANCELLED = "cancelled"
    TIMEOUT = "timeout"
    LLM_ERROR = "llm_error"
    TOOL_ERROR = "tool_error"
    ERROR = "error"
    INSUFFICIENT_CREDITS = "insufficient_credits"
    # The model has no price while the tenant pays in credits or the call falls under a budget.
    NO_PRICE = "no_price"
    APPROVAL_DENIED = "approval_denied"
    APPROVAL_EXPIRED = "approval_expired"
    CONTEXT_OVERFLOW = "context_overflow"
    RATE_LIMITED = "rate_limited"


class RunRoute(models.TextChoices):
    SIMPLE = "simple"
    TOOL = "tool"
    COMPLEX = "complex"


class Run(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(  # indexed by run_tenant_created
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    session = models.ForeignKey(  # indexed by run_session_lane
        Session, on_delete=models.CASCADE, related_name="runs", db_index=False
    )
    agent = models.ForeignKey(Agent, on_delete=models.SET_NULL, null=True, related_name="runs")
    user_message = models.ForeignKey(Message, on_delete=models.SET_NULL, null=True, related_name="+")
    created_by = models.ForeignKey(  # indexed by run_member_status
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="+",
        db_index=False,
    )
    parent_run = models.ForeignKey(
        "self", on_delete=models.CASCADE, null=True, blank=True, related_name="children"
    )
    # A sub-agent's spawn_subagent call in its parent: one child per call, however often the parent replays.
    parent_tool_call_id = models.CharField(max_length=200, blank=True)
    # What a child run does (its plan step or delegated task), as people see it.
    title = models.CharField(max_length=300, blank=True)
    retry_of = models.ForeignKey(
        "self", on_delete=models.SET_NULL, null=True, blank=True, related_name="retries"
    )
    # The agent's configuration when the run was created: editing the agent mid-run
    # must not change a run that already started.
    agent_config = models.JSONField(default=dict)
    status = models.CharField(max_length=20, choices=RunStatus.choices, default=RunStatus.CREATED)
    stop_reason = models.CharField(max_length=30, choices=StopReason.choices, blank=True)
    version = models.PositiveIntegerField(default=0)
    attempt = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    model_calls = models.PositiveIntegerField(default=0)
    input_tokens = models.PositiveBigIntegerField(default=0)
    output_tokens = models.PositiveBigIntegerField(default=0)
    cache_read_tokens = models.PositiveBigIntegerField(default=0)
    cache_write_tokens = models.PositiveBigIntegerField(default=0)
    # What its model calls cost, in micro-credits (billing), and how many had no known price.
    cost_micros = models.BigIntegerField(default=0)
    unpriced_model_calls = models.PositiveIntegerField(default=0)
    lease_owner = models.CharField(max_length=100, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    # complex: the run planned (its model called create_plan, or its agent plans every message);
    # empty: its own loop answered. simple and tool: runs routed by the former classifying call.
    route = models.CharField(max_length=10, choices=RunRoute.choices, blank=True)
    route_reason = models.CharField(max_length=1000, blank=True)
    # A planning run's usage with its executors' (own + children), set when it finishes.
    tree_usage = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    # Not a column: how many steps earlier attempts stored, read with the run by its claim
    # (sessions.lane) for its recorder; None when the run was read otherwise.
    stored_step_count: int | None = None

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["session", "status", "created_at"], name="run_session_lane"),
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
            models.Index(fields=["tenant", "-created_at"], name="run_tenant_created"),
            # A post counts its member's active runs (tenants.quotas): found among the member's
            # own runs, whatever other tenants have running.
            models.Index(fields=["created_by", "status"], name="run_member_status"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["parent_run", "parent_tool_call_id"],
                condition=~models.Q(parent_tool_call_id=""),
                name="run_unique_subagent_per_tool_call",
            )
        ]

    def __str__(self) -> str:
        return f"run {self.pk} ({self.status})"

    @property
    def usage(self) -> dict[str, int]:
        return {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "total_tokens": self.input_tokens + self.output_tokens,
        }


class StepKind(models.TextChoices):
    MODEL_CALL = "model_call"
    TOOL_CALL = "tool_call"
    PLAN = "plan"


class StepStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"


class Step(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    run = models.ForeignKey(  # indexed by step_unique_index
        Run, on_delete=models.CASCADE, related_name="steps", db_index=False
    )
    # The run's tenant, kept on the step so a tenant's recent steps are read without its runs.
    tenant = models.ForeignKey(  # indexed by step_tenant_finished
        Tenant, on_delete=models.CASCADE, related_name="+", db_index=False
    )
    index = models.PositiveIntegerField()
    kind = models.CharField(max_length=20, choices=StepKind.choices)
    status = models.CharField(max_length=20, choices=StepStatus.choices, default=StepStatus.PENDING)
    version = models.PositiveIntegerField(default=0)
    # For tool calls: the model's call id, so a resumed run finds calls that already ran.
    tool_call_id = models.CharField(max_length=200, blank=True)
    input = models.JSONField(default=dict)
    output = models.JSONField(default=dict)
    error = models.TextField(blank=True)
    input_tokens = models.PositiveIntegerField(default=0)
    output_tokens = models.PositiveIntegerField(default=0)
    cache_read_tokens = models.PositiveIntegerField(default=0)
    cache_write_tokens = models.PositiveIntegerField(default=0)
    # A model call's cost in micro-credits (billing); None when its model has no known price.
    cost_micros = models.BigIntegerField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["run", "index"]
        constraints = [models.UniqueConstraint(fields=["run", "index"], name="step_unique_index")]
        indexes = [
            models.Index(fields=["run", "tool_call_id"], name="step_tool_call"),
            # The tenant's model-token rate (tenants.quotas) reads its steps finished in the last
            # minute, and usage reports its steps of a span of days: neither scans other tenants'.
            models.Index(fields=["tenant", "finished_at"], name="step_tenant_finished"),
        ]

    def __str__(self) -> str:
        return f"step {self.index} {self.kind} ({self.status})"


class RunEvent(models.Model):
    """One event of the wire contract, numbered within its session (DESIGN.md §4)."""

    id = models.BigAutoField(primary_key=True)
    session = models.ForeignKey(  # indexed by runevent_unique_seq
        Session, on_delete=models.CASCADE, related_name="events", db_index=False
    )
    run = models.ForeignKey(  # indexed by runevent_run_seq
        Run, on_delete=models.CASCADE, null=True, blank=True, related_name="events", db_index=False
    )
    seq = models.BigIntegerField()
    type = models.CharField(max_length=40)
    data = models.JSONField(default=dict)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["session", "seq"]
        constraints = [models.UniqueConstraint(fields=["session", "seq"], name="runevent_unique_seq")]
        indexes = [models.Index(fields=["run", "seq"], name="runevent_run_seq")]

    def __str__(self) -> str:
        return f"{self.seq} {self.type}"


class IdempotencyRecord(models.Model):
    """Remembers what a POST with an Idempotency-Key created, for the repeat of it."""

    id = models.BigAutoField(primary_key=True)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=200)
    session = models.ForeignKey(Session, on_delete=models.CASCADE, related_name="+")
    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="+")
    run = models.ForeignKey(Run, on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "user", "key"], name="idempotency_unique_key_per_user")
        ]

    def __str__(self) -> str:
        return f"idempotency key {self.key}"
