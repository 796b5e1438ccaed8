"""Writes to tenant tools (HTTP), tool assignments and agents' tool policies."""

import re
from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import IntegrityError, transaction

from agents.models import Agent
from audit.models import AuditAction
from audit.services import audit_record, audit_values
from core.http_headers import HEADER_NAME_PATTERN, HEADER_NAME_RULE, header_values_problem
from core.json_schemas import schema_problem
from core.storable import UNSTORABLE_RULE, is_storable
from tenants.actors import Actor
from tools.models import TOOL_NAME_REGEX, AgentTool, Tool, ToolKind, ToolPolicy, ToolProfile

HTTP_METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")
TOOL_FIELDS = (
    "name",
    "description",
    "group",
    "input_schema",
    "is_read_only",
    "requires_approval",
    "owner_only",
    "timeout_seconds",
    "is_enabled",
    "http_method",
    "url_template",
    "headers",
    "secret_headers",
)
POLICY_FIELDS = (
    "profile",
    "allow",
    "deny",
    "max_calls_per_turn",
    "max_calls_per_run",
    "require_approval",
    "editable_arguments",
)
SECRET_TOOL_FIELDS = ("secret_headers",)
POLICY_ENTRY = re.compile(r"^(group:)?[a-zA-Z0-9_*?:\-\[\]]{1,100}$")


def _validate_tool(tool: Tool) -> None:
    errors: dict[str, list[str]] = {}
    if not re.match(TOOL_NAME_REGEX, tool.name):
        errors["name"] = ["Use 1-64 letters, digits, _ or -."]
    elif "__" in tool.name:
        errors["name"] = ["'__' is reserved for MCP tools (<server>__<tool>)."]
    schema_problem = _input_schema_problem(tool.input_schema)
    if schema_problem:
        errors["input_schema"] = [schema_problem]
    if tool.http_method not in HTTP_METHODS:
        errors["http_method"] = [f"Choose one of {', '.join(HTTP_METHODS)}."]
    if not tool.url_template.startswith(("http://", "https://")):
        errors["url_template"] = ["Must be an http:// or https:// URL template."]
    if not 1 <= tool.timeout_seconds <= 300:
        errors["timeout_seconds"] = ["Must be between 1 and 300."]
    for name in ("headers", "secret_headers"):
        problem = _headers_problem(getattr(tool, name))
        if problem:
            errors[name] = [problem]
    if errors:
        raise ValidationError(errors)


def _input_schema_problem(schema: Any) -> str:
    if not is_storable(schema):
        return UNSTORABLE_RULE
    if problem := schema_problem(schema):
        return problem
    if schema.get("type", "object") != "object":
        return "The arguments schema must describe an object."
    return ""


def _headers_problem(headers: Any) -> str:
    if not isinstance(headers, dict) or not all(
        isinstance(name, str) and isinstance(value, str) for name, value in headers.items()
    ):
        return "Must be an object of header names to string values."
    if not all(HEADER_NAME_PATTERN.match(name) for name in headers):
        return HEADER_NAME_RULE
    return header_values_problem(headers.values())


def _save_tool(tool: Tool, *, before: dict[str, Any] | None) -> Tool:
    _validate_tool(tool)
    if Tool.objects.filter(tenant=tool.tenant, name=tool.name).exclude(pk=tool.pk).exists():
        raise ValidationError({"name": ["A tool with this name already exists in this tenant."]})
    try:
        with transaction.atomic():
            tool.save()
            _record_tool(tool, AuditAction.CREATE if before is None else AuditAction.UPDATE, before=before)
    except IntegrityError as error:
        raise ValidationError({"name": ["A tool with this name already exists in this tenant."]}) from error
    return tool


def _record_tool(tool: Tool, action: str, *, before: dict[str, Any] | None) -> None:
    assert tool.tenant is not None  # built-in tools are never written here
    audit_record(
        tenant=tool.tenant,
        action=action,
        object_type="tool",
        object_id=tool.pk,
        object_label=tool.name,
        before=before,
        after=None if action == AuditAction.DELETE else audit_values(tool, TOOL_FIELDS),
        secret_fields=SECRET_TOOL_FIELDS,
    )


def http_tool_create(*, actor: Actor, **fields: Any) -> Tool:
    fields.setdefault("group", "http")
    fields.setdefault("http_method", "GET")
    tool = Tool(
        tenant=actor.tenant, kind=ToolKind.HTTP, **{k: v for k, v in fields.items() if k in TOOL_FIELDS}
    )
    return _save_tool(tool, before=None)


def tool_update(*, actor: Actor, tool: Tool, **fields: Any) -> Tool:
    _require_tenant_tool(tool)
    editable = (
        TOOL_FIELDS
        if tool.kind == ToolKind.HTTP
        else ("is_enabled", "requires_approval", "owner_only", "timeout_seconds", "description")
    )
    before = audit_values(tool, TOOL_FIELDS)
    for name, value in fields.items():
        if name not in editable:
            raise ValidationError({name: [f"Cannot be changed on {tool.kind} tools."]})
        setattr(tool, name, value)
    if tool.kind == ToolKind.HTTP:
        return _save_tool(tool, before=before)
    with transaction.atomic():
        tool.save()
        _record_tool(tool, AuditAction.UPDATE, before=before)
    return tool


@transaction.atomic
def tool_delete(*, tool: Tool) -> None:
    _require_tenant_tool(tool)
    if tool.kind == ToolKind.MCP:
        raise ValidationError(
            {"non_field_errors": ["MCP tools follow their server; remove or re-check the server."]}
        )
    _record_tool(tool, AuditAction.DELETE, before=audit_values(tool, TOOL_FIELDS))
    tool.delete()


def _require_tenant_tool(tool: Tool) -> None:
    if tool.tenant_id is None:
        raise PermissionDenied("Built-in tools are read-only.")


def _validate_policy(policy: ToolPolicy) -> None:
    errors: dict[str, list[str]] = {}
    if policy.profile not in ToolProfile.values:
        errors["profile"] = [f"Choose one of {', '.join(ToolProfile.values)}."]
    for name in ("allow", "deny", "require_approval", "editable_arguments"):
        entries = getattr(policy, name)
        if not isinstance(entries, list) or not all(
            isinstance(e, str) and POLICY_ENTRY.match(e) for e in entries
        ):
            errors[name] = ["Must be a list of tool names, group:<name> entries or * wildcards."]
    if not 1 <= policy.max_calls_per_turn <= 100:
        errors["max_calls_per_turn"] = ["Must be between 1 and 100."]
    if not 1 <= policy.max_calls_per_run <= 1000:
        errors["max_calls_per_run"] = ["Must be between 1 and 1000."]
    if errors:
        raise ValidationError(errors)


@transaction.atomic
def agent_tools_update(
    *, actor: Actor, agent: Agent, policy_fields: dict[str, Any], assigned_tools: list[Tool] | None
) -> ToolPolicy:
    """Set the agent's policy fields and, when given, exactly which tenant tools it is assigned.

    One audit entry (``tool_policy``) covers both; an agent without a stored policy has the
    default one, so storing the defaults records nothing.
    """
    before = _policy_values(ToolPolicy.objects.filter(agent=agent).first() or ToolPolicy(agent=agent))
    policy, _ = ToolPolicy.objects.get_or_create(agent=agent)
    for name, value in policy_fields.items():
        if name not in POLICY_FIELDS:
            raise ValidationError({name: ["Unknown field."]})
        setattr(policy, name, value)
    _validate_policy(policy)
    policy.save()
    if assigned_tools is not None:
        if any(tool.tenant_id != actor.tenant.pk for tool in assigned_tools):
            raise ValidationError({"assigned_tools": ["Only this tenant's tools can be assigned."]})
        AgentTool.objects.filter(agent=agent).exclude(tool__in=assigned_tools).delete()
        existing = set(AgentTool.objects.filter(agent=agent).values_list("tool_id", flat=True))
        AgentTool.objects.bulk_create(
            [AgentTool(agent=agent, tool=tool) for tool in assigned_tools if tool.pk not in existing]
        )
    audit_record(
        tenant=actor.tenant,
        action=AuditAction.UPDATE,
        object_type="tool_policy",
        object_id=agent.pk,
        object_label=agent.name,
        before=before,
        after=_policy_values(policy),
    )
    return policy


def _policy_values(policy: ToolPolicy) -> dict[str, Any]:
    """The policy's fields and the names of the tools its agent is assigned."""
    assigned = AgentTool.objects.filter(agent_id=policy.agent_id).order_by("tool__name")
    return {
        **audit_values(policy, POLICY_FIELDS),
        "assigned_tools": list(assigned.values_list("tool__name", flat=True)),
    }
