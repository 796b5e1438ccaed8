"""Health checks of MCP servers: connect, list tools, record health, keep the tool rows in step.

``POST /api/v1/mcp-servers/{id}/check/`` runs one check; a django-q2 schedule checks every
enabled server every few minutes, one task per server.
"""

import logging
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.utils import timezone
from django_q.models import Schedule

from core.json_schemas import schema_problem
from core.outside_waits import waiting_outside
from core.tasks import enqueue_task
from mcp_servers.models import McpHealth, McpServer
from mcp_servers.results import DiscoveredTool, McpUnavailable
from mcp_servers.tool_names import TOOL_NAME_PATTERN, mcp_tool_group, mcp_tool_public_name
from tools.models import Tool, ToolKind

logger = logging.getLogger(__name__)

DEFAULT_DEGRADED_LATENCY_MS = 2000
HEALTH_SCHEDULE_NAME = "agentry.check_mcp_servers"
HEALTH_SCHEDULE_MINUTES = 5
MAX_DESCRIPTION_LENGTH = 4000
MAX_ERROR_LENGTH = 2000


@dataclass(frozen=True)
class ToolChanges:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # Tools the server offers that cannot be exposed (invalid schema, name taken…).
    issues: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class CheckResult:
    health_status: str
    latency_ms: int | None
    error: str
    tool_names: list[str]
    changes: ToolChanges


def mcp_server_check(server: McpServer) -> CheckResult:
    """Connect, initialize, list tools; record health and update the server's tools.

    A failed check records ``down`` and the error, and leaves the tools as they were: a
    server that is briefly away keeps its tools and their assignments. During a request, raises
    ``ServerBusy`` with nothing recorded when the server's threads for outside waits are taken.
    """
    try:
        from mcp_servers.client import discover_server_tools  # loads the MCP SDK on first use

        with waiting_outside():
            listing = discover_server_tools(server)
    except McpUnavailable as error:
        return _record_down(server, error.message)
    discovered, latency_ms = listing.tools, listing.latency_ms
    with transaction.atomic():
        # The row lock keeps a scheduled check and a manual one from syncing the same
        # tools at once (both would insert the same new names).
        if not McpServer.objects.select_for_update().filter(pk=server.pk).exists():
            return _record_down(server, "the server was deleted during the check")
        changes = _sync_tools(server, discovered)
        threshold = getattr(settings, "MCP_DEGRADED_LATENCY_MS", DEFAULT_DEGRADED_LATENCY_MS)
        status = McpHealth.DEGRADED if latency_ms > threshold or changes.issues else McpHealth.HEALTHY
        summary = "; ".join(changes.issues)[:MAX_ERROR_LENGTH]
        _save_health(server, status=status, latency_ms=latency_ms, error=summary)
    tool_names = list(server.tools.order_by("name").values_list("name", flat=True))
    return CheckResult(
        health_status=status, latency_ms=latency_ms, error=summary, tool_names=tool_names, changes=changes
    )


def mcp_server_check_by_id(server_id: str) -> None:
    """django-q2 task: check one server. Idempotent; a deleted or disabled server is skipped."""
    server = McpServer.objects.filter(pk=UUID(server_id), is_enabled=True).first()
    if server is not None:
        mcp_server_check(server)


def check_enabled_servers() -> int:
    """Scheduled: enqueue one check per enabled server, so a slow server delays only itself."""
    server_ids = list(McpServer.objects.filter(is_enabled=True).values_list("pk", flat=True))
    for server_id in server_ids:
        enqueue_task(mcp_server_check_by_id, str(server_id), task_name=f"mcp-check-{server_id}")
    return len(server_ids)


def ensure_mcp_health_schedule() -> None:
    Schedule.objects.update_or_create(
        name=HEALTH_SCHEDULE_NAME,
        defaults={
            "func": "mcp_servers.health.check_enabled_servers",
            "schedule_type": Schedule.MINUTES,
            "minutes": HEALTH_SCHEDULE_MINUTES,
            "repeats": -1,
        },
    )


def _record_down(server: McpServer, message: str) -> CheckResult:
    logger.info("MCP server %s (%s) is down: %s", server.name, server.pk, message)
    _save_health(server, status=McpHealth.DOWN, latency_ms=None, error=message[:MAX_ERROR_LENGTH])
    tool_names = list(server.tools.order_by("name").values_list("name", flat=True))
    return CheckResult(
        health_status=McpHealth.DOWN,
        latency_ms=None,
        error=server.last_error,
        tool_names=tool_names,
        changes=ToolChanges(),
    )


def _save_health(server: McpServer, *, status: str, latency_ms: int | None, error: str) -> None:
    now = timezone.now()
    values = {
        "health_status": status,
        "latency_ms": latency_ms,
        "last_error": error,
        "last_checked_at": now,
        "updated_at": now,
    }
    # An update, not save(): a server deleted during the check stays deleted.
    McpServer.objects.filter(pk=server.pk).update(**values)
    for name, value in values.items():
        setattr(server, name, value)


def _sync_tools(server: McpServer, discovered: list[DiscoveredTool]) -> ToolChanges:
    existing = {tool.mcp_tool_name: tool for tool in Tool.objects.filter(mcp_server=server)}
    wanted, issues = _wanted_tools(server, discovered)
    taken_names = set(
        Tool.objects.filter(
            tenant_id=server.tenant_id, name__in=[values["name"] for values in wanted.values()]
        )
        .exclude(mcp_server=server)
        .values_list("name", flat=True)
    )
    changes = ToolChanges(issues=issues)
    removed = [tool for mcp_name, tool in existing.items() if mcp_name not in wanted]
    for tool in removed:
        changes.removed.append(tool.name)
    Tool.objects.filter(pk__in=[tool.pk for tool in removed]).delete()
    for mcp_name, values in wanted.items():
        if values["name"] in taken_names:
            changes.issues.append(f"tool {mcp_name!r}: the name {values['name']} is taken by another tool")
            continue
        current = existing.get(mcp_name)
        if current is None:
            Tool.objects.create(
                tenant_id=server.tenant_id, mcp_server=server, mcp_tool_name=mcp_name, **values
            )
            changes.added.append(values["name"])
        elif any(getattr(current, name) != value for name, value in values.items()):
            for name, value in values.items():
                setattr(current, name, value)
            current.save()
            changes.changed.append(values["name"])
    for names in (changes.added, changes.changed, changes.removed):
        names.sort()
    return changes


def _wanted_tools(
    server: McpServer, discovered: list[DiscoveredTool]
) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """The Tool fields each exposable tool should have, by its MCP name; and why others are not."""
    wanted: dict[str, dict[str, Any]] = {}
    issues: list[str] = []
    for tool in discovered:
        name = mcp_tool_public_name(server_name=server.name, tool_name=tool.name)
        problem = _schema_problem(tool.input_schema)
        if not tool.name or not TOOL_NAME_PATTERN.match(name):
            problem = "the tool has no usable name"
        elif tool.name in wanted:
            problem = "the server lists this tool twice"
        if problem:
            issues.append(f"tool {tool.name!r}: {problem}")
            continue
        wanted[tool.name] = {
            "name": name,
            "kind": ToolKind.MCP,
            "group": mcp_tool_group(server_name=server.name),
            "description": tool.description[:MAX_DESCRIPTION_LENGTH],
            "input_schema": tool.input_schema,
            "annotations": tool.annotations,
            "is_read_only": tool.is_read_only,
            "timeout_seconds": server.call_timeout_seconds,
        }
    return wanted, issues


def _schema_problem(schema: dict[str, Any]) -> str:
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return 'its input schema is not a JSON Schema of "type": "object"'
    if problem := schema_problem(schema):
        return f"its input schema cannot be used: {problem}"
    return ""
