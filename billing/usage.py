"""Usage and cost reports: completed model calls per day, member, agent or model, read when asked.

Each model call counts on the day (UTC) it finished, for the member who started its run (an
executor's or sub-agent's run is started by its parent's member), its run's agent and the model
its run's agent snapshot names. Owners and admins see the whole tenant; members and viewers their
own runs only.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any, Literal

from django.db.models import Count, Q, QuerySet, Sum
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import TruncDate

from billing.costs import Cost, calls_cost
from sessions.models import Step, StepKind, StepStatus
from tenants.actors import Actor
from tenants.models import Role

GroupBy = Literal["day", "member", "agent", "model"]
GROUPINGS: tuple[GroupBy, ...] = ("day", "member", "agent", "model")
MAX_REPORT_DAYS = 366
COLUMNS = [
    "key",
    "label",
    "runs",
    "model_calls",
    "input_tokens",
    "output_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "cost",
    "unpriced_model_calls",
]


@dataclass(frozen=True)
class UsageRow:
    key: str
    label: str
    runs: int
    model_calls: int
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost_micros: int
    unpriced_model_calls: int

    @property
    def cost(self) -> Cost:
        return calls_cost(
            micros=self.cost_micros,
            model_calls=self.model_calls,
            unpriced_model_calls=self.unpriced_model_calls,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


TOTALS = {
    "runs": Count("run_id", distinct=True),
    "model_calls": Count("id"),
    "input_tokens": Sum("input_tokens"),
    "output_tokens": Sum("output_tokens"),
    "cache_read_tokens": Sum("cache_read_tokens"),
    "cache_write_tokens": Sum("cache_write_tokens"),
    "cost_micros": Sum("cost_micros"),
    "unpriced_model_calls": Count("id", filter=Q(cost_micros__isnull=True)),
}


def _day_key(values: dict[str, Any]) -> tuple[str, str]:
    day = values["day"].isoformat()
    return day, day


def _member_key(values: dict[str, Any]) -> tuple[str, str]:
    if values["run__created_by_id"] is None:
        return "", "(no member)"
    label = values["run__created_by__email"] or values["run__created_by__username"]
    return str(values["run__created_by_id"]), label


def _agent_key(values: dict[str, Any]) -> tuple[str, str]:
    if values["run__agent_id"] is None:
        return "", "(deleted agent)"
    return str(values["run__agent_id"]), values["run__agent__name"]


def _model_key(values: dict[str, Any]) -> tuple[str, str]:
    name = f"{values['provider'] or ''}:{values['model'] or ''}"
    return name, name


# Per grouping: the columns it groups by (names, and aliases of expressions) and its row's key and label.
GROUPS: dict[GroupBy, tuple[list[str], dict[str, Any], Callable[[dict[str, Any]], tuple[str, str]]]] = {
    "day": ([], {"day": TruncDate("finished_at", tzinfo=UTC)}, _day_key),
    "member": (
        ["run__created_by_id", "run__created_by__email", "run__created_by__username"],
        {},
        _member_key,
    ),
    "agent": (["run__agent_id", "run__agent__name"], {}, _agent_key),
    "model": (
        [],
        {
            "provider": KeyTextTransform("model_provider", "run__agent_config"),
            "model": KeyTextTransform("model_name", "run__agent_config"),
        },
        _model_key,
    ),
}


def usage_steps_for_actor(*, actor: Actor) -> QuerySet[Step]:
    """The completed model calls of the actor's tenant that the actor may count."""
    steps = Step.objects.filter(tenant=actor.tenant, kind=StepKind.MODEL_CALL, status=StepStatus.COMPLETED)
    if not actor.can(Role.ADMIN):
        steps = steps.filter(run__created_by_id=actor.user_id)
    return steps


def usage_report_for_actor(*, actor: Actor, group_by: GroupBy, since: date, until: date) -> list[UsageRow]:
    """Rows of usage and cost for the days ``since`` to ``until`` (both included, UTC): days in
    order, the other groupings dearest first."""
    steps = usage_steps_for_actor(actor=actor).filter(
        finished_at__gte=datetime.combine(since, time.min, tzinfo=UTC)
    )
    if until < date.max:
        steps = steps.filter(
            finished_at__lt=datetime.combine(until + timedelta(days=1), time.min, tzinfo=UTC)
        )
    names, expressions, key_of = GROUPS[group_by]
    grouped = (
        steps.order_by()
        .values(*names, **expressions)
        .annotate(**{f"total_{name}": total for name, total in TOTALS.items()})
    )
    rows = []
    for values in grouped:
        key, label = key_of(values)
        totals = {name: values[f"total_{name}"] or 0 for name in TOTALS}
        rows.append(UsageRow(key=key, label=label, **totals))
    if group_by == "day":
        return sorted(rows, key=lambda row: row.key)
    return sorted(rows, key=lambda row: (-row.cost_micros, -row.unpriced_model_calls, row.label, row.key))


def usage_by_day(rows: list[UsageRow], *, since: date, until: date) -> list[UsageRow]:
    """Day rows with the days that had no usage filled in as zeros, for charts."""
    by_key = {row.key: row for row in rows}
    days = []
    day = since
    while day <= until:
        key = day.isoformat()
        days.append(by_key.get(key) or UsageRow(key, key, 0, 0, 0, 0, 0, 0, 0, 0))
        day += timedelta(days=1)
    return days


def usage_row_cells(row: UsageRow) -> list[Any]:
    """The row as the report's columns (COLUMNS): cost as a decimal string, empty when unknown."""
    return [
        row.key,
        row.label,
        row.runs,
        row.model_calls,
        row.input_tokens,
        row.output_tokens,
        row.cache_read_tokens,
        row.cache_write_tokens,
        row.cost.text,
        row.unpriced_model_calls,
    ]
