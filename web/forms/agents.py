from typing import Any

from django import forms

from agents.models import (
    DEFAULT_MODEL_NAMES,
    MAX_STEPS_RANGE,
    MAX_TOKENS_RANGE,
    PLANNING_MODE_HELP,
    TEMPERATURE_RANGES,
    Agent,
    ModelProvider,
    PlanningMode,
)
from agents.services import AGENT_SETTING_FIELDS, agent_name_errors, agent_setting_errors
from tools.models import Tool, ToolPolicy, ToolProfile
from web.forms.common import RangeInput

WIDEST_TEMPERATURE = max(high for _, high in TEMPERATURE_RANGES.values())


class AgentForm(forms.Form):
    """The agent's definition and its tool profile; the services check the rules."""

    name = forms.CharField(max_length=100)
    description = forms.CharField(max_length=1000, required=False, widget=forms.Textarea(attrs={"rows": 2}))
    goal = forms.CharField(
        max_length=10_000,
        required=False,
        widget=forms.Textarea(attrs={"rows": 3}),
        help_text="What the agent is for; it is part of every run's instructions.",
    )
    system_prompt = forms.CharField(
        max_length=100_000, required=False, widget=forms.Textarea(attrs={"rows": 6})
    )
    model_provider = forms.ChoiceField(label="Provider", choices=ModelProvider.choices)
    model_name = forms.CharField(
        label="Model",
        max_length=200,
        required=False,
        help_text="Leave empty for the provider's default.",
        widget=forms.TextInput(attrs={"list": "model-suggestions", "autocomplete": "off"}),
    )
    temperature = forms.FloatField(
        widget=RangeInput(attrs={"min": 0, "max": WIDEST_TEMPERATURE, "step": 0.05}),
    )
    max_steps = forms.IntegerField(
        label="Max steps",
        help_text="The most model calls one run may make.",
        widget=RangeInput(attrs={"min": MAX_STEPS_RANGE[0], "max": MAX_STEPS_RANGE[1], "step": 1}),
    )
    max_tokens = forms.IntegerField(
        label="Max output tokens",
        widget=forms.NumberInput(attrs={"min": MAX_TOKENS_RANGE[0], "max": MAX_TOKENS_RANGE[1]}),
    )
    tool_profile = forms.ChoiceField(choices=ToolProfile.choices, initial=ToolProfile.MINIMAL)
    tools = forms.ModelMultipleChoiceField(
        label="Tenant tools",
        queryset=Tool.objects.none(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text="HTTP and MCP tools this agent may use (built-ins come with the profile).",
    )
    run_timeout_seconds = forms.IntegerField(
        label="Run timeout (seconds)", required=False, help_text="Empty: the tenant's default."
    )
    context_compaction_enabled = forms.BooleanField(
        label="Summarize older turns when the context fills up", required=False
    )
    planning_mode = forms.ChoiceField(
        label="Planning",
        choices=PlanningMode.choices,
        help_text=PLANNING_MODE_HELP,
    )
    is_active = forms.BooleanField(label="Active (can start new sessions)", required=False)

    def __init__(
        self, *args: Any, assignable_tools: Any, tenant_id: Any, agent_id: Any = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.tenant_id = tenant_id
        self.agent_id = agent_id
        tools_field = self.fields["tools"]
        assert isinstance(tools_field, forms.ModelMultipleChoiceField)
        tools_field.queryset = assignable_tools
        self.temperature_ranges = {
            str(provider): list(bounds) for provider, bounds in TEMPERATURE_RANGES.items()
        }
        self.default_model_names = {str(provider): name for provider, name in DEFAULT_MODEL_NAMES.items()}

    def clean(self) -> dict[str, Any]:
        """The service's checks on what parsed, so their errors show beside the others at once."""
        cleaned = super().clean() or {}
        parsed = {
            field: cleaned[field]
            for field in (*AGENT_SETTING_FIELDS, "model_provider")
            if cleaned.get(field) is not None
        }
        errors = agent_setting_errors(parsed)
        if cleaned.get("name"):
            errors |= agent_name_errors(
                tenant_id=self.tenant_id, name=cleaned["name"], agent_id=self.agent_id
            )
        for field, messages in errors.items():
            if field not in self.errors:
                self.add_error(field, messages)
        return cleaned

    @classmethod
    def initial_for(
        cls, agent: Agent | None, *, policy: ToolPolicy | None, assigned: list[Tool]
    ) -> dict[str, Any]:
        if agent is None:
            return {
                "model_provider": ModelProvider.OFFLINE,
                "temperature": 0.7,
                "max_steps": 20,
                "max_tokens": 4096,
                "tool_profile": ToolProfile.MINIMAL,
                "context_compaction_enabled": True,
                "planning_mode": PlanningMode.AUTO,
                "is_active": True,
            }
        return {
            "name": agent.name,
            "description": agent.description,
            "goal": agent.goal,
            "system_prompt": agent.system_prompt,
            "model_provider": agent.model_provider,
            "model_name": agent.model_name,
            "temperature": agent.temperature,
            "max_steps": agent.max_steps,
            "max_tokens": agent.max_tokens,
            "tool_profile": policy.profile if policy else ToolProfile.MINIMAL,
            "tools": assigned,
            "run_timeout_seconds": agent.run_timeout_seconds,
            "context_compaction_enabled": agent.context_compaction_enabled,
            "planning_mode": agent.planning_mode,
            "is_active": agent.is_active,
        }

    def agent_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        return {
            "name": data["name"],
            "description": data["description"],
            "goal": data["goal"],
            "system_prompt": data["system_prompt"],
            "model_provider": data["model_provider"],
            "model_name": data["model_name"].strip(),
            "temperature": data["temperature"],
            "max_steps": data["max_steps"],
            "max_tokens": data["max_tokens"],
            "run_timeout_seconds": data["run_timeout_seconds"],
            "context_compaction_enabled": data["context_compaction_enabled"],
            "planning_mode": data["planning_mode"],
            "is_active": data["is_active"],
        }
