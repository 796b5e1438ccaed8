"""Which tools a run may use: the built-ins (kept as rows) and the agent's assigned tools,
filtered by the agent's tool policy as it was when the run was created."""

from dataclasses import dataclass
from typing import Any
from uuid import UUID

from django.db import IntegrityError, transaction

from agents.models import Agent
from sessions.models import Run
from sessions.statements.post_reads import agent_tool_ids
from sessions.statements.run_reads import candidate_tools
from tenants.models import Role
from tools.builtins import load_builtin_tools
from tools.builtins.base import BUILTIN_REGISTRY
from tools.models import Tool, ToolKind, ToolPolicy
from tools.policy import Decision, PolicyRules, ToolFacts, decide


def ensure_builtin_tools() -> None:
    """Keep one row per built-in (tenant NULL), so they list and assign like any tool.

    One query when nothing changed; rows are created or updated after an upgrade.
    """
    global _builtins_synced_in_this_process
    load_builtin_tools()
    existing = {tool.name: tool for tool in Tool.objects.filter(tenant__isnull=True)}
    for builtin in BUILTIN_REGISTRY.values():
        fields = {
            "kind": ToolKind.BUILTIN,
            "group": builtin.group,
            "description": builtin.description,
            "input_schema": builtin.input_schema,
            "is_read_only": builtin.is_read_only,
            "timeout_seconds": builtin.timeout_seconds,
        }
        row = existing.get(builtin.name)
        if row is None:
            try:
                with transaction.atomic():
                    Tool.objects.create(tenant=None, name=builtin.name, **fields)
            except IntegrityError:
                pass  # another process created it at the same moment
        elif any(getattr(row, name) != value for name, value in fields.items()):
            Tool.objects.filter(pk=row.pk).update(**fields)
    _builtins_synced_in_this_process = True


def policy_snapshot(agent: Agent) -> dict[str, Any]:
    """The agent's policy and assignments as stored on each run (edits mid-run do not apply)."""
    policy = _stored_policy(agent) or ToolPolicy(agent=agent)
    return {
        "profile": policy.profile,
        "allow": list(policy.allow),
        "deny": list(policy.deny),
        "require_approval": list(policy.require_approval) + list(agent.approval_required_tools),
        "editable_arguments": list(policy.editable_arguments),
        "max_calls_per_turn": policy.max_calls_per_turn,
        "max_calls_per_run": policy.max_calls_per_run,
        "assigned_tool_ids": _assigned_tool_ids(agent),
    }


def _assigned_tool_ids(agent: Agent) -> list[str]:
    return sorted(str(pk) for pk in agent_tool_ids(agent.pk))


def _stored_policy(agent: Agent) -> ToolPolicy | None:
    try:
        return agent.tool_policy  # read with the agent by session_get_for_posting
    except ToolPolicy.DoesNotExist:
        return None


def tool_facts(tool: Tool) -> ToolFacts:
    return ToolFacts(
        name=tool.name,
        group=tool.group,
        is_builtin=tool.kind == ToolKind.BUILTIN,
        is_enabled=tool.is_enabled,
        owner_only=tool.owner_only,
        requires_approval=tool.requires_approval,
        is_read_only=tool.is_read_only,
    )


def is_available(tool: Tool) -> bool:
    """A built-in that lacks its configuration is hidden, not faked; so are a disabled server's tools."""
    if tool.kind == ToolKind.MCP and (tool.mcp_server is None or not tool.mcp_server.is_enabled):
        return False
    builtin = BUILTIN_REGISTRY.get(tool.name) if tool.kind == ToolKind.BUILTIN else None
    return builtin is None or builtin.is_available()


def starts_runs(tool: Tool) -> bool:
    builtin = BUILTIN_REGISTRY.get(tool.name) if tool.kind == ToolKind.BUILTIN else None
    return builtin is not None and builtin.starts_runs


def asks_user(tool: Tool) -> bool:
    builtin = BUILTIN_REGISTRY.get(tool.name) if tool.kind == ToolKind.BUILTIN else None
    return builtin is not None and builtin.asks_user


def searches_files(tool: Tool) -> bool:
    builtin = BUILTIN_REGISTRY.get(tool.name) if tool.kind == ToolKind.BUILTIN else None
    return builtin is not None and builtin.searches_files


def is_offered(tool: Tool, agent_config: dict[str, Any], *, is_child_run: bool) -> bool:
    """Available, and of use to this run: no spawning or asking the user from a child, no search with
    nothing to search."""
    if not is_available(tool) or (is_child_run and (starts_runs(tool) or asks_user(tool))):
        return False
    return bool(agent_config.get("searchable_files")) or not searches_files(tool)


@dataclass
class RunToolset:
    """The run's candidate tools by name, with the policy's decision for each."""

    tools: dict[str, Tool]
    decisions: dict[str, Decision]
    max_calls_per_turn: int
    max_calls_per_run: int
    is_owner_run: bool

    def allowed(self) -> list[Tool]:
        return [tool for name, tool in self.tools.items() if self.decisions[name].is_allowed]


def _run_tool_candidates(tenant_id: Any, assigned: set[str]) -> list[Tool]:
    """The built-ins and the tenant's assigned tools, each with its MCP server."""
    return candidate_tools(tenant_id=tenant_id, assigned_ids=sorted(UUID(tool_id) for tool_id in assigned))


def assigned_tool_ids(agent_config: dict[str, Any]) -> set[str]:
    """The tools the run's agent snapshot assigns (its policy's ``assigned_tool_ids``)."""
    return set((agent_config.get("tool_policy") or {}).get("assigned_tool_ids", ()))


_builtins_synced_in_this_process = False


def _builtin_rows_are_current(candidates: list[Tool]) -> bool:
    """Rows are synced with the code once per process; a missing row (e.g. after a flush) syncs again."""
    load_builtin_tools()
    names = {tool.name for tool in candidates if tool.tenant_id is None}
    return _builtins_synced_in_this_process and names >= BUILTIN_REGISTRY.keys()


def toolset_for_run(run: Run) -> RunToolset:
    snapshot = run.agent_config.get("tool_policy") or {}
    rules = PolicyRules(
        profile=snapshot.get("profile", "minimal"),
        allow=tuple(snapshot.get("allow", ())),
        deny=tuple(snapshot.get("deny", ())),
        require_approval=tuple(snapshot.get("require_approval", ())),
        editable_arguments=tuple(snapshot.get("editable_arguments", ())),
        read_only_only=bool(run.agent_config.get("read_only_tools")),
    )
    assigned = assigned_tool_ids(run.agent_config)
    candidates = _run_tool_candidates(run.tenant_id, assigned)
    if not _builtin_rows_are_current(candidates):
        ensure_builtin_tools()
        candidates = _run_tool_candidates(run.tenant_id, assigned)
    is_owner_run = run.agent_config.get("actor_role") == Role.OWNER
    is_child_run = run.parent_run_id is not None or run.agent_config.get("role") == "executor"
    tools = {
        tool.name: tool
        for tool in candidates
        if is_offered(tool, run.agent_config, is_child_run=is_child_run)
    }
    decisions = {
        name: decide(tool_facts(tool), rules, is_assigned=str(tool.pk) in assigned, is_owner_run=is_owner_run)
        for name, tool in tools.items()
    }
    return RunToolset(
        tools=tools,
        decisions=decisions,
        is_owner_run=is_owner_run,
        max_calls_per_turn=int(snapshot.get("max_calls_per_turn", 8)),
        max_calls_per_run=int(snapshot.get("max_calls_per_run", 50)),
    )
