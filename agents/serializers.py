from typing import Any

from rest_framework import serializers

from agents.models import MAX_STEPS_RANGE, MAX_TOKENS_RANGE, Agent, ModelProvider
from agents.services import RUN_TIMEOUT_RANGE, TOOL_NAME_PATTERN, TOOL_NAMES_MESSAGE
from core.api.serializers import StrictModelSerializer, not_blank


def tool_names(names: list[str]) -> None:
    """Checked here too, beside the ranges, so one answer names every bad field."""
    if not all(TOOL_NAME_PATTERN.match(name) for name in names):
        raise serializers.ValidationError(TOOL_NAMES_MESSAGE)


def within(bounds: tuple[Any, Any]) -> dict[str, Any]:
    """A number field's range, stated in the schema, refused with the service's own words."""
    low, high = bounds
    message = f"Must be between {low} and {high}."
    return {
        "min_value": low,
        "max_value": high,
        "error_messages": {"min_value": message, "max_value": message},
    }


class AgentSerializer(StrictModelSerializer):
    model_provider = serializers.ChoiceField(choices=ModelProvider.choices, required=False)
    model_label = serializers.CharField(read_only=True)
    created_by = serializers.EmailField(
        source="created_by.email", read_only=True, default=None, allow_null=True
    )
    approval_required_tools = serializers.ListField(
        child=serializers.CharField(max_length=64),
        required=False,
        max_length=100,
        validators=[tool_names],
    )

    class Meta:
        model = Agent
        fields = [
            "id",
            "name",
            "description",
            "goal",
            "system_prompt",
            "model_provider",
            "model_name",
            "model_label",
            "temperature",
            "max_steps",
            "max_tokens",
            "approval_required_tools",
            "run_timeout_seconds",
            "context_compaction_enabled",
            "planning_mode",
            "is_active",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "model_label", "created_by", "created_at", "updated_at"]
        extra_kwargs = {
            "name": {
                "error_messages": {"blank": "Name cannot be empty."},
                "validators": [not_blank("Name cannot be empty.")],
            },
            "max_steps": within(MAX_STEPS_RANGE),
            "max_tokens": within(MAX_TOKENS_RANGE),
            "run_timeout_seconds": within(RUN_TIMEOUT_RANGE),
            "description": {"max_length": 1000},
            "goal": {"max_length": 10_000},
            "system_prompt": {"max_length": 100_000},
        }
        # Uniqueness per tenant is a business rule checked by the service.
        validators: list[object] = []
