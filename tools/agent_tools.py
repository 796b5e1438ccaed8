"""What an agent's tool settings amount to: its policy, assignments and each tool's verdict."""

from typing import Any

from agents.models import Agent
from tenants.actors import Actor
from tools.models import AgentTool, Tool, ToolPolicy
from tools.policy import PolicyRules, decide
from tools.registry import ensure_builtin_tools, is_available, tool_facts


def agent_tools_overview(*, agent: Agent, actor: Actor) -> dict[str, Any]:
    """For the API and pages: the verdict each tool gets for a run started by an owner."""
    ensure_builtin_tools()
    policy = ToolPolicy.objects.filter(agent=agent).first() or ToolPolicy(agent=agent)
    assigned = set(AgentTool.objects.filter(agent=agent).values_list("tool_id", flat=True))
    rules = PolicyRules(
        profile=policy.profile,
        allow=tuple(policy.allow),
        deny=tuple(policy.deny),
        require_approval=tuple(policy.require_approval) + tuple(agent.approval_required_tools),
        editable_arguments=tuple(policy.editable_arguments),
    )
    tools = Tool.objects.filter(tenant__isnull=True) | Tool.objects.filter(tenant=actor.tenant)
    verdicts = []
    for tool in tools.order_by("group", "name"):
        if not is_available(tool):
            continue
        decision = decide(tool_facts(tool), rules, is_assigned=tool.pk in assigned, is_owner_run=True)
        if tool.tenant_id is not None and tool.pk not in assigned and not decision.is_allowed:
            continue  # unassigned tenant tools are listed by /tools/, not here
        verdicts.append(
            {
                "name": tool.name,
                "group": tool.group,
                "kind": tool.kind,
                "is_allowed": decision.is_allowed,
                "reason": decision.reason,
                "requires_approval": decision.requires_approval,
                "arguments_editable_at_approval": decision.allows_argument_edits,
                "is_read_only": tool.is_read_only,
            }
        )
    return {"policy": policy, "assigned_tools": sorted(assigned, key=str), "tools": verdicts}
