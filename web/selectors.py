"""Reads the pages need beyond the apps' own selectors; each starts from the actor's tenant."""

from dataclasses import dataclass
from datetime import UTC, date, timedelta
from typing import Any
from uuid import UUID

from django.contrib.auth.models import User
from django.db.models import Count, Q, QuerySet, Sum
from django.http import Http404
from django.utils import timezone

from agents.models import Agent
from agents.selectors import agent_get_for_actor, agent_list_for_actor
from billing.costs import Cost
from billing.usage import UsageRow, usage_by_day, usage_report_for_actor
from mcp_servers.models import McpServer
from memory.models import Memory, MemoryStatus, MemoryType
from memory.selectors import memory_list_for_actor, memory_list_for_agent, memory_search_for_agent
from sessions.models import RunStatus, Session
from sessions.selectors import run_list_for_actor, session_list_for_actor
from sessions.state import ACTIVE_RUN_STATUSES
from tenants.actors import Actor
from tenants.invitations import invitation_list_pending_for_actor
from tenants.limits import DEFAULT_LIMITS, tenant_limit
from tenants.models import ApiKey, Invitation, Membership, Role
from tools.agent_tools import agent_tools_overview
from tools.models import Tool, ToolKind, ToolPolicy
from tools.selectors import tool_list_for_actor
from web.run_activity import (
    RecentRun,
    RunDay,
    RunGroup,
    recent_runs_for_actor,
    run_days_for_actor,
    run_groups_for_actor,
    servers_down_for_actor,
)

USAGE_WINDOW = timedelta(days=7)
TOP_LEVEL = Q(parent_run__isnull=True)
REPORT_DAYS = 30


def memberships_of_user(*, user: Any) -> QuerySet[Membership]:
    """The tenants a person belongs to, for the tenant switcher."""
    return Membership.objects.filter(user_id=user.pk).select_related("tenant").order_by("tenant__name")


@dataclass(frozen=True)
class WeeklyUsage:
    runs: int
    completed: int
    failed: int
    input_tokens: int
    output_tokens: int

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


@dataclass(frozen=True)
class UsageReports:
    """The dashboard's usage and cost of the last REPORT_DAYS days (UTC), as billing.usage counts it."""

    since: date
    until: date
    days: list[UsageRow]
    agents: list[UsageRow]
    members: list[UsageRow]
    models: list[UsageRow]
    # Runs and errors per day (started, not finished: a run that fails counts on the day it began).
    run_days: list[RunDay]
    run_agents: list[RunGroup]
    run_members: list[RunGroup]
    # Owners and admins see the whole workspace; others their own runs.
    is_whole_tenant: bool

    @property
    def total(self) -> Cost:
        return sum((row.cost for row in self.days), Cost())


def usage_reports_for_actor(*, actor: Actor, until: date | None = None) -> UsageReports:
    until = until or timezone.now().astimezone(UTC).date()
    since = until - timedelta(days=REPORT_DAYS - 1)
    rows = {
        group_by: usage_report_for_actor(actor=actor, group_by=group_by, since=since, until=until)
        for group_by in ("day", "agent", "member", "model")
    }
    return UsageReports(
        since=since,
        until=until,
        days=usage_by_day(rows["day"], since=since, until=until),
        agents=rows["agent"],
        members=rows["member"],
        models=rows["model"],
        run_days=run_days_for_actor(actor=actor, since=since, until=until),
        run_agents=run_groups_for_actor(actor=actor, group_by="agent", since=since, until=until),
        run_members=run_groups_for_actor(actor=actor, group_by="member", since=since, until=until),
        is_whole_tenant=actor.can(Role.ADMIN),
    )


@dataclass(frozen=True)
class Dashboard:
    recent_sessions: list[Session]
    recent_runs: list[RecentRun]
    usage: WeeklyUsage
    reports: UsageReports
    servers_down: list[McpServer]
    agent_count: int
    first_agent: Agent | None


def dashboard_for_actor(*, actor: Actor) -> Dashboard:
    since = timezone.now() - USAGE_WINDOW
    totals = (
        run_list_for_actor(actor=actor)
        .filter(created_at__gte=since)
        .aggregate(
            # Executors and sub-agents count with their parent run; their tokens count in full.
            runs=Count("id", filter=TOP_LEVEL),
            completed=Count("id", filter=TOP_LEVEL & Q(status=RunStatus.COMPLETED)),
            failed=Count("id", filter=TOP_LEVEL & Q(status__in=[RunStatus.FAILED, RunStatus.TIMEOUT])),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
        )
    )
    agents = agent_list_for_actor(actor=actor)
    return Dashboard(
        recent_sessions=list(session_list_for_actor(actor=actor)[:6]),
        recent_runs=recent_runs_for_actor(actor=actor),
        usage=WeeklyUsage(**{name: value or 0 for name, value in totals.items()}),
        reports=usage_reports_for_actor(actor=actor),
        servers_down=servers_down_for_actor(actor=actor),
        agent_count=agents.count(),
        first_agent=agents.filter(is_active=True).order_by("created_at").first(),
    )


def agent_search_for_actor(
    *, actor: Actor, query: str = "", provider: str = "", status: str = ""
) -> QuerySet[Agent]:
    """Agents matching the list page's search and filters, with their session and live run counts."""
    agents = agent_list_for_actor(actor=actor)
    if query:
        agents = agents.filter(
            Q(name__icontains=query) | Q(description__icontains=query) | Q(goal__icontains=query)
        )
    if provider:
        agents = agents.filter(model_provider=provider)
    if status in ("active", "inactive"):
        agents = agents.filter(is_active=status == "active")
    return agents.annotate(
        session_count=Count("sessions", distinct=True),
        active_run_count=Count("runs", filter=Q(runs__status__in=ACTIVE_RUN_STATUSES), distinct=True),
    ).order_by("name")


@dataclass(frozen=True)
class ToolCatalog:
    builtin_groups: list[tuple[str, list[Tool]]]
    http_tools: list[Tool]
    mcp_tools: list[Tool]
    agents: list[Agent]


def tool_catalog_for_actor(*, actor: Actor) -> ToolCatalog:
    tools = list(tool_list_for_actor(actor=actor).order_by("group", "name"))
    groups: dict[str, list[Tool]] = {}
    for tool in tools:
        if tool.kind == ToolKind.BUILTIN:
            groups.setdefault(tool.group or "other", []).append(tool)
    return ToolCatalog(
        builtin_groups=sorted(groups.items()),
        http_tools=[tool for tool in tools if tool.kind == ToolKind.HTTP],
        mcp_tools=[tool for tool in tools if tool.kind == ToolKind.MCP],
        agents=list(agent_list_for_actor(actor=actor).select_related("tool_policy").order_by("name")),
    )


def assignable_tools_for_actor(*, actor: Actor) -> QuerySet[Tool]:
    """The tenant's own tools (HTTP and MCP), which agents get by assignment."""
    return Tool.objects.filter(tenant=actor.tenant).select_related("mcp_server").order_by("group", "name")


@dataclass(frozen=True)
class TenantSettings:
    memberships: list[Membership]
    invitations: list[Invitation]
    api_keys: list[ApiKey]
    limits: list[tuple[str, Any, Any]]


def tenant_settings_for_actor(*, actor: Actor) -> TenantSettings:
    return TenantSettings(
        memberships=list(
            Membership.objects.filter(tenant=actor.tenant).select_related("user").order_by("user__username")
        ),
        invitations=list(invitation_list_pending_for_actor(actor=actor)),
        api_keys=list(ApiKey.objects.filter(tenant=actor.tenant).select_related("created_by")),
        limits=[
            (name, tenant_limit(actor.tenant, name), default) for name, default in DEFAULT_LIMITS.items()
        ],
    )


def membership_get_for_actor(*, actor: Actor, membership_id: UUID | str) -> Membership:
    try:
        return Membership.objects.select_related("user").get(tenant=actor.tenant, pk=UUID(str(membership_id)))
    except (Membership.DoesNotExist, ValueError) as error:
        raise Http404("membership not found") from error


@dataclass(frozen=True)
class AccountOverview:
    memberships: list[Membership]
    api_keys: list[ApiKey]


def account_overview_for_actor(*, actor: Actor) -> AccountOverview:
    """The signed-in person's tenants and their own keys in the active tenant."""
    return AccountOverview(
        memberships=list(memberships_of_user(user=actor.user)),
        api_keys=list(ApiKey.objects.filter(tenant=actor.tenant, created_by_id=actor.user_id)),
    )


def own_api_key_get_for_actor(*, actor: Actor, api_key_id: UUID | str) -> ApiKey:
    """One of the actor's own keys in the active tenant; anyone else's is the same 404."""
    try:
        return ApiKey.objects.get(tenant=actor.tenant, created_by_id=actor.user_id, pk=UUID(str(api_key_id)))
    except (ApiKey.DoesNotExist, ValueError) as error:
        raise Http404("API key not found") from error


def api_key_get_for_actor(*, actor: Actor, api_key_id: UUID | str) -> ApiKey:
    try:
        return ApiKey.objects.get(tenant=actor.tenant, pk=UUID(str(api_key_id)))
    except (ApiKey.DoesNotExist, ValueError) as error:
        raise Http404("API key not found") from error


@dataclass(frozen=True)
class AgentDetail:
    agent: Agent
    tools: dict[str, Any]
    recent_sessions: list[Session]
    memory_count: int
    suggested_memory_count: int


def agent_detail_for_actor(*, actor: Actor, agent_id: UUID | str) -> AgentDetail:
    agent = agent_get_for_actor(actor=actor, agent_id=agent_id)
    memories = memory_list_for_agent(actor=actor, agent=agent)
    return AgentDetail(
        agent=agent,
        tools=agent_tools_overview(agent=agent, actor=actor),
        recent_sessions=list(session_list_for_actor(actor=actor).filter(agent=agent)[:5]),
        memory_count=memories.filter(status=MemoryStatus.ACTIVE).count(),
        suggested_memory_count=memories.filter(status=MemoryStatus.SUGGESTED).count(),
    )


@dataclass(frozen=True)
class AgentToolSettings:
    policy: ToolPolicy
    assigned: list[Tool]
    assignable: QuerySet[Tool]
    # Tool names whose calls wait for a person: the policy's list and any the agent itself holds
    # (the API's ``approval_required_tools``), as the tool policy page edits them together.
    approvals: list[str]


def agent_tool_settings(*, actor: Actor, agent: Agent | None) -> AgentToolSettings:
    """The agent's tool policy and assignments, as its forms start from (defaults for a new agent)."""
    assignable = assignable_tools_for_actor(actor=actor)
    if agent is None:
        return AgentToolSettings(policy=ToolPolicy(), assigned=[], assignable=assignable, approvals=[])
    policy = ToolPolicy.objects.filter(agent=agent).first() or ToolPolicy(agent=agent)
    assigned = list(assignable.filter(assignments__agent=agent))
    approvals = list(dict.fromkeys([*policy.require_approval, *agent.approval_required_tools]))
    return AgentToolSettings(policy=policy, assigned=assigned, assignable=assignable, approvals=approvals)


MEMORY_PAGE_SIZE = 200


@dataclass(frozen=True)
class MemoryListing:
    memories: list[Memory]
    agents: list[Agent]
    agent: Agent | None
    suggested_count: int
    is_ranked: bool


def memory_listing_for_actor(
    *, actor: Actor, agent_id: str = "", type: str = "", status: str = "", query: str = ""
) -> MemoryListing:
    """Memories for the list page: filtered, and ranked as retrieval would when searching one agent."""
    agents = list(agent_list_for_actor(actor=actor).order_by("name"))
    agent = next((candidate for candidate in agents if str(candidate.pk) == agent_id), None)
    memories = memory_list_for_actor(actor=actor).select_related("agent")
    suggested = memories.filter(status=MemoryStatus.SUGGESTED)
    if agent is not None and query:
        ranked = memory_search_for_agent(
            actor=actor,
            agent=agent,
            query=query,
            limit=MEMORY_PAGE_SIZE,
            statuses=(status,) if status in MemoryStatus.values else (),
            types=(type,) if type in MemoryType.values else (),
        )
        return MemoryListing(
            memories=[item.memory for item in ranked],
            agents=agents,
            agent=agent,
            suggested_count=suggested.count(),
            is_ranked=True,
        )
    if agent is not None:
        memories = memories.filter(agent=agent)
    if type in MemoryType.values:
        memories = memories.filter(type=type)
    if status in MemoryStatus.values:
        memories = memories.filter(status=status)
    if query:
        memories = memories.filter(content__icontains=query)
    return MemoryListing(
        memories=list(memories.order_by("-updated_at")[:MEMORY_PAGE_SIZE]),
        agents=agents,
        agent=agent,
        suggested_count=suggested.count(),
        is_ranked=False,
    )


def member_users_for_actor(*, actor: Actor) -> QuerySet[User]:
    return User.objects.filter(memberships__tenant=actor.tenant).order_by("username")
