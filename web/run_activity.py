"""The dashboard's reads about runs themselves: runs and errors per day, and recent runs with their
executors and sub-agents folded under them."""

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

from django.db.models import Count, Q, QuerySet
from django.db.models.functions import TruncDate

from mcp_servers.models import McpHealth, McpServer
from mcp_servers.selectors import mcp_server_list_for_actor
from sessions.models import Run, RunStatus
from sessions.selectors import run_list_for_actor
from tenants.actors import Actor
from tenants.models import Role

ERROR_STATUSES = (RunStatus.FAILED, RunStatus.TIMEOUT)


@dataclass(frozen=True)
class RunDay:
    """Runs started on a day (UTC) that people asked for: executors and sub-agents count with their parent."""

    key: str
    runs: int
    errors: int

    @property
    def label(self) -> str:
        return self.key


def _counted_runs(actor: Actor) -> QuerySet[Run]:
    """Top-level runs the actor may count: the whole tenant's for owners and admins, else their own
    (as billing.usage counts usage)."""
    runs = run_list_for_actor(actor=actor).filter(parent_run__isnull=True)
    if not actor.can(Role.ADMIN):
        runs = runs.filter(created_by_id=actor.user_id)
    return runs


def run_days_for_actor(*, actor: Actor, since: date, until: date) -> list[RunDay]:
    """One row per day from ``since`` to ``until`` (both included), days without runs as zeros."""
    counted = (
        _counted_runs(actor)
        .filter(
            created_at__gte=datetime.combine(since, time.min, tzinfo=UTC),
            created_at__lt=datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC),
        )
        .order_by()
        .values(day=TruncDate("created_at", tzinfo=UTC))
        .annotate(runs=Count("id"), errors=Count("id", filter=Q(status__in=ERROR_STATUSES)))
    )
    by_day = {row["day"].isoformat(): (row["runs"], row["errors"]) for row in counted}
    days = []
    day = since
    while day <= until:
        runs, errors = by_day.get(day.isoformat(), (0, 0))
        days.append(RunDay(day.isoformat(), runs, errors))
        day += timedelta(days=1)
    return days


@dataclass(frozen=True)
class RunGroup:
    """Runs of one agent or member over the report's days, and how many failed or timed out."""

    key: str
    label: str
    runs: int
    errors: int


# Per grouping: its key column, the columns its label is the first non-empty of, and the label
# of rows without one (a deleted agent; a run no member started).
RUN_GROUPS = {
    "agent": ("agent_id", ("agent__name",), "(deleted agent)"),
    "member": ("created_by_id", ("created_by__email", "created_by__username"), "(no member)"),
}


def run_groups_for_actor(*, actor: Actor, group_by: str, since: date, until: date) -> list[RunGroup]:
    """Runs per agent or member from ``since`` to ``until`` (UTC days), the busiest first."""
    key_field, label_fields, missing = RUN_GROUPS[group_by]
    counted = (
        _counted_runs(actor)
        .filter(
            created_at__gte=datetime.combine(since, time.min, tzinfo=UTC),
            created_at__lt=datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC),
        )
        .order_by()
        .values(key_field, *label_fields)
        .annotate(runs=Count("id"), errors=Count("id", filter=Q(status__in=ERROR_STATUSES)))
    )
    groups = [
        RunGroup(
            key=str(row[key_field] or ""),
            label=next((row[field] for field in label_fields if row[field]), missing),
            runs=row["runs"],
            errors=row["errors"],
        )
        for row in counted
    ]
    return sorted(groups, key=lambda group: (-group.runs, group.label, group.key))


@dataclass(frozen=True)
class RecentRun:
    """A top-level run with its executors and sub-agents (oldest first)."""

    run: Run
    children: list[Run]

    @property
    def total_tokens(self) -> int:
        return self.run.usage["total_tokens"] + sum(child.usage["total_tokens"] for child in self.children)


def recent_runs_for_actor(*, actor: Actor, limit: int = 8) -> list[RecentRun]:
    parents = list(
        run_list_for_actor(actor=actor)
        .filter(parent_run__isnull=True)
        .select_related("agent", "session")
        .order_by("-created_at")[:limit]
    )
    children: dict[object, list[Run]] = {parent.pk: [] for parent in parents}
    for child in Run.objects.filter(parent_run__in=parents).order_by("created_at"):
        children[child.parent_run_id].append(child)
    return [RecentRun(parent, children[parent.pk]) for parent in parents]


def servers_down_for_actor(*, actor: Actor) -> list[McpServer]:
    """Enabled MCP servers that are down and that an active agent of the tenant has tools of:
    a server no agent uses stops nothing, so it is no reason to raise the alarm."""
    return list(
        mcp_server_list_for_actor(actor=actor)
        .filter(
            is_enabled=True,
            health_status=McpHealth.DOWN,
            tools__assignments__agent__tenant=actor.tenant,
            tools__assignments__agent__is_active=True,
        )
        .distinct()
        .order_by("name")
    )
