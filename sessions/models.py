"""Sessions, messages, runs, steps and run events (DESIGN.md sections 2-4)."""

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
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
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

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["session", "status", "created_at"], name="run_session_lane"),
            models.Index(fields=["status", "lease_expires_at"], name="run_status_lease"),
            models.Index(fields=["tenant", "-created_at"], name="run_tenant_created"),
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
            # The tenant's model-token rate (tenants.quotas) reads the steps finished in the last minute.
            models.Index(fields=["finished_at"], name="step_finished"),
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


class PlanStatus(models.TextChoices):
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"


class Plan(models.Model):
    """The planner's plan for one run: steps carried out by executor child runs (sessions.planning)."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="+")
    run = models.OneToOneField(Run, on_delete=models.CASCADE, related_name="plan")
    goal = models.TextField(blank=True)
    status = models.CharField(max_length=10, choices=PlanStatus.choices, default=PlanStatus.ACTIVE)
    # Bumped by every replan; replans counts those caused by failed steps.
    revision = models.PositiveIntegerField(default=1)
    replans = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return f"plan of run {self.run_id} ({self.status})"


class PlanStep(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    plan = models.ForeignKey(Plan, on_delete=models.CASCADE, related_name="steps")
    # The planner's id for the step ("s1"); dependencies name these.
    key = models.CharField(max_length=50)
    index = models.PositiveIntegerField()
    title = models.CharField(max_length=300)
    instructions = models.TextField()
    depends_on = models.JSONField(default=list)
    expected_output = models.TextField(blank=True)
    tools = models.JSONField(default=list)
    status = models.CharField(max_length=20, choices=StepStatus.choices, default=StepStatus.PENDING)
    result = models.TextField(blank=True)
    error = models.TextField(blank=True)
    # A failed step whose failure a replan already answered (so it is not replanned again).
    is_replanned = models.BooleanField(default=False)
    child_run = models.OneToOneField(
        Run, on_delete=models.SET_NULL, null=True, blank=True, related_name="plan_step"
    )
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["plan", "index"]
        constraints = [models.UniqueConstraint(fields=["plan", "key"], name="planstep_unique_key")]

    def __str__(self) -> str:
        return f"plan step {self.key} ({self.status})"
