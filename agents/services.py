"""Writes to agents. Validation of business rules lives here, with field-level errors."""

import re
from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction

from agents.models import MAX_STEPS_RANGE, MAX_TOKENS_RANGE, TEMPERATURE_RANGES, Agent, ModelProvider
from audit.models import AuditAction
from audit.services import audit_record, audit_values
from tenants.actors import Actor
from tenants.limits import tenant_limit
from tenants.models import Tenant

EDITABLE_FIELDS = (
    "name",
    "description",
    "goal",
    "system_prompt",
    "model_provider",
    "model_name",
    "temperature",
    "max_steps",
    "max_tokens",
    "is_active",
    "approval_required_tools",
    "run_timeout_seconds",
    "context_compaction_enabled",
    "planning_mode",
)
TOOL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
RUN_TIMEOUT_RANGE = (1, 24 * 3600)
TOOL_NAMES_MESSAGE = "Must be a list of tool names (letters, digits, _ and -)."
NAME_TAKEN = "An agent with this name already exists in this tenant."
# The numeric model settings agent_setting_errors checks against their ranges.
AGENT_SETTING_FIELDS = ("temperature", "max_steps", "max_tokens", "run_timeout_seconds")


def agent_setting_errors(settings: Mapping[str, Any]) -> dict[str, list[str]]:
    """Range errors for the model settings in ``settings`` (absent ones are skipped).

    The service checks a whole agent with it; the web form checks what parsed, so every
    field's error shows at once.
    """
    errors: dict[str, list[str]] = {}
    provider = settings.get("model_provider")
    if "model_provider" in settings and provider not in ModelProvider.values:
        errors["model_provider"] = [f"Unknown provider; choose one of {', '.join(ModelProvider.values)}."]
    elif provider is not None and settings.get("temperature") is not None:
        low, high = TEMPERATURE_RANGES[ModelProvider(provider)]
        if not low <= settings["temperature"] <= high:
            errors["temperature"] = [f"Must be between {low} and {high} for {provider}."]
    ranges = {
        "max_steps": MAX_STEPS_RANGE,
        "max_tokens": MAX_TOKENS_RANGE,
        "run_timeout_seconds": RUN_TIMEOUT_RANGE,
    }
    for field, (low, high) in ranges.items():
        value = settings.get(field)
        if value is not None and not low <= value <= high:
            errors[field] = [f"Must be between {low} and {high}."]
    return errors


def agent_name_errors(*, tenant_id: Any, name: str, agent_id: Any = None) -> dict[str, list[str]]:
    """The name's error if another agent of the tenant has it (``agent_id``: the one being edited)."""
    taken = Agent.objects.filter(tenant_id=tenant_id, name=name.strip()).exclude(pk=agent_id)
    return {"name": [NAME_TAKEN]} if taken.exists() else {}


def _validate_agent(*, agent: Agent) -> None:
    errors: dict[str, list[str]] = {}
    if not agent.name.strip():
        errors["name"] = ["Name cannot be empty."]
    errors.update(
        agent_setting_errors(
            {field: getattr(agent, field) for field in (*AGENT_SETTING_FIELDS, "model_provider")}
        )
    )
    names = agent.approval_required_tools
    if not isinstance(names, list) or not all(
        isinstance(n, str) and TOOL_NAME_PATTERN.match(n) for n in names
    ):
        errors["approval_required_tools"] = [TOOL_NAMES_MESSAGE]
    if "name" not in errors:
        errors.update(agent_name_errors(tenant_id=agent.tenant_id, name=agent.name, agent_id=agent.pk))
    if errors:
        raise ValidationError(errors)


def _save(agent: Agent, *, before: dict[str, Any] | None) -> Agent:
    """Validate, save and record the change from ``before`` (``None``: a new agent)."""
    agent.name = agent.name.strip()
    _validate_agent(agent=agent)
    try:
        with transaction.atomic():
            agent.save()
            _record(agent, AuditAction.CREATE if before is None else AuditAction.UPDATE, before=before)
    except IntegrityError as error:  # a concurrent create took the name between check and insert
        raise ValidationError({"name": [NAME_TAKEN]}) from error
    return agent


def _audited(agent: Agent) -> dict[str, Any]:
    return audit_values(agent, EDITABLE_FIELDS)


def _record(agent: Agent, action: str, *, before: dict[str, Any] | None) -> None:
    after = None if action == AuditAction.DELETE else _audited(agent)
    audit_record(
        tenant=agent.tenant,
        action=action,
        object_type="agent",
        object_id=agent.pk,
        object_label=agent.name,
        before=before,
        after=after,
    )


def _require_room_for_an_agent(tenant_id: Any) -> None:
    tenant = Tenant.objects.get(pk=tenant_id)
    if Agent.objects.filter(tenant=tenant).count() >= tenant_limit(tenant, "max_agents"):
        raise ValidationError({"non_field_errors": ["This tenant has reached its agent limit."]})


def agent_check(*, agent: Agent) -> None:
    """The checks agent_create and agent_update make, for a form that saves on its own (the admin)."""
    if agent._state.adding:
        _require_room_for_an_agent(agent.tenant_id)
    _validate_agent(agent=agent)


def agent_create(*, actor: Actor, **fields: Any) -> Agent:
    _require_room_for_an_agent(actor.tenant.pk)
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in sorted(unknown)})
    agent = Agent(tenant=actor.tenant, created_by=actor.user, **fields)
    return _save(agent, before=None)


def agent_update(*, agent: Agent, **fields: Any) -> Agent:
    unknown = set(fields) - set(EDITABLE_FIELDS)
    if unknown:
        raise ValidationError({name: ["Unknown field."] for name in sorted(unknown)})
    before = _audited(agent)
    for name, value in fields.items():
        setattr(agent, name, value)
    return _save(agent, before=before)


def agent_save_checked(*, agent: Agent) -> Agent:
    """Save an agent a form built and checked with ``agent_check`` (the admin), and record it.

    The form has already changed the instance, so the values before come from the stored row.
    """
    stored = None if agent._state.adding else Agent.objects.filter(pk=agent.pk).first()
    return _save(agent, before=_audited(stored) if stored is not None else None)


@transaction.atomic
def agent_delete(*, agent: Agent) -> None:
    _record(agent, AuditAction.DELETE, before=_audited(agent))
    agent.delete()
