"""Plans: the planner's steps, each executed by a child run."""

import uuid

from django.db import models

from sessions.models.runs import Run, StepStatus
from tenants.models import Tenant


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
