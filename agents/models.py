import uuid

from django.conf import settings
from django.db import models

from tenants.models import Tenant


class ModelProvider(models.TextChoices):
    ANTHROPIC = "anthropic", "Anthropic"
    OPENAI = "openai", "OpenAI-compatible"
    OFFLINE = "offline", "Offline demo model (local, no API key)"


# The temperature range each provider accepts.
TEMPERATURE_RANGES = {
    ModelProvider.ANTHROPIC: (0.0, 1.0),
    ModelProvider.OPENAI: (0.0, 2.0),
    ModelProvider.OFFLINE: (0.0, 1.0),
}
DEFAULT_MODEL_NAMES = {
    ModelProvider.ANTHROPIC: "claude-sonnet-5",
    ModelProvider.OPENAI: "gpt-5.4-mini",
    ModelProvider.OFFLINE: "offline-demo",
}
MAX_STEPS_RANGE = (1, 100)
MAX_TOKENS_RANGE = (1, 200_000)


class PlanningMode(models.TextChoices):
    # Every message runs the normal loop, without the create_plan tool.
    DIRECT = "direct"
    # The normal loop, whose model may call create_plan to have a request planned (the default).
    AUTO = "auto"
    # Every message is planned and carried out by executor sub-agents.
    PLAN = "plan"


# One text for the form, the admin and the API schema: no extra call classifies a message.
PLANNING_MODE_HELP = (
    "Auto: the agent's own first model call decides whether to answer, use tools or call "
    "create_plan, which has a request of several independent parts planned and carried out by "
    "read-only executors. Direct: the normal loop, without create_plan. Plan: every message is planned."
)


class Agent(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="agents")
    name = models.CharField(max_length=100)
    description = models.CharField(max_length=1000, blank=True)
    goal = models.TextField(max_length=10_000, blank=True)
    system_prompt = models.TextField(max_length=100_000, blank=True)
    model_provider = models.CharField(
        max_length=20, choices=ModelProvider.choices, default=ModelProvider.OFFLINE
    )
    model_name = models.CharField(max_length=200, blank=True)
    temperature = models.FloatField(default=0.7)
    # The most model calls one run may make.
    max_steps = models.PositiveIntegerField(default=20)
    # The most output tokens of one model response.
    max_tokens = models.PositiveIntegerField(default=4096)
    # Tool names whose calls wait for a person's approval before they run.
    approval_required_tools = models.JSONField(default=list, blank=True)
    # Wall-clock limit of one run; empty means the tenant's default.
    run_timeout_seconds = models.PositiveIntegerField(null=True, blank=True)
    # Summarize older turns when the context nears the model's window (agents.runtime.compaction).
    context_compaction_enabled = models.BooleanField(default=True)
    # How messages are routed between a direct answer, the tool loop and a plan (sessions.planning).
    planning_mode = models.CharField(
        max_length=10, choices=PlanningMode.choices, default=PlanningMode.AUTO, help_text=PLANNING_MODE_HELP
    )
    is_active = models.BooleanField(default=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="agent_unique_name_per_tenant")
        ]
        indexes = [models.Index(fields=["tenant", "-created_at"], name="agent_tenant_created")]

    def __str__(self) -> str:
        return self.name

    @property
    def effective_model_name(self) -> str:
        return self.model_name or DEFAULT_MODEL_NAMES[ModelProvider(self.model_provider)]

    @property
    def model_label(self) -> str:
        """The model as shown to people; the offline model always says what it is."""
        if self.model_provider == ModelProvider.OFFLINE:
            return "offline-demo (local demo model, not an LLM)"
        return f"{self.model_provider}:{self.effective_model_name}"
