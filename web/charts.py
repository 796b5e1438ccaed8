"""Bar charts drawn on the server as SVG geometry: no script, readable without one.

A chart is an image with a summary (its title and description) and the same numbers in a table
next to it, so people who cannot see it lose nothing.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from billing.costs import Cost, cost_label
from billing.usage import UsageRow
from web.run_activity import RunDay, RunGroup
from web.selectors import UsageReports

Row = TypeVar("Row")

WIDTH = 600
# Columns: a bar per day, their labels under the plot.
COLUMN_HEIGHT = 160
COLUMN_LABEL_SPACE = 28
# Rows: a bar per agent, member or model, its label above it.
ROW_STEP = 52
ROW_BAR_HEIGHT = 18
MAX_ROWS = 10


@dataclass(frozen=True)
class Bar:
    x: float
    y: float
    width: float
    height: float
    label: str
    value_text: str
    # Where the bar's label is drawn (days: some columns only, so they do not overlap).
    label_x: float
    label_y: float
    is_labelled: bool
    # SVG text-anchor: the last column's label ends at the chart's edge instead of crossing it.
    label_anchor: str = "middle"


@dataclass(frozen=True)
class BarChart:
    title: str
    summary: str
    bars: list[Bar]
    width: int
    height: int

    @property
    def view_box(self) -> str:
        return f"0 0 {self.width} {self.height}"


def column_chart(
    rows: Sequence[Row],
    *,
    title: str,
    value: Callable[[Row], int],
    label: Callable[[Row], str],
    value_text: Callable[[Row], str],
    summary: str,
    label_every: int = 7,
) -> BarChart:
    """One column per row (days), labelled every ``label_every`` columns counting back from the last."""
    largest = max((value(row) for row in rows), default=0) or 1
    slot = WIDTH / max(len(rows), 1)
    bars = []
    for index, row in enumerate(rows):
        height = COLUMN_HEIGHT * value(row) / largest
        x = index * slot + slot * 0.15
        is_last = index == len(rows) - 1
        bars.append(
            Bar(
                x=round(x, 2),
                y=round(COLUMN_HEIGHT - height, 2),
                width=round(slot * 0.7, 2),
                height=round(height, 2),
                label=label(row),
                value_text=value_text(row),
                label_x=WIDTH if is_last else round(index * slot + slot / 2, 2),
                label_y=COLUMN_HEIGHT + 22,
                is_labelled=(len(rows) - 1 - index) % label_every == 0,
                label_anchor="end" if is_last else "middle",
            )
        )
    return BarChart(title, summary, bars, WIDTH, COLUMN_HEIGHT + COLUMN_LABEL_SPACE)


def row_chart(
    rows: Sequence[Row],
    *,
    title: str,
    value: Callable[[Row], int],
    label: Callable[[Row], str],
    value_text: Callable[[Row], str],
    summary: str,
) -> BarChart:
    """One horizontal bar per row (the first ``MAX_ROWS``), its label and amount above it."""
    shown = list(rows)[:MAX_ROWS]
    largest = max((value(row) for row in shown), default=0) or 1
    bars = []
    for index, row in enumerate(shown):
        top = index * ROW_STEP
        bars.append(
            Bar(
                x=0,
                y=top + 26,
                width=round(WIDTH * value(row) / largest, 2),
                height=ROW_BAR_HEIGHT,
                label=label(row),
                value_text=value_text(row),
                label_x=0,
                label_y=top + 18,
                is_labelled=True,
            )
        )
    return BarChart(title, summary, bars, WIDTH, max(len(shown), 1) * ROW_STEP)


@dataclass(frozen=True)
class UsageChart:
    """A chart of the dashboard with the rows it draws (shown as a table beside it)."""

    slug: str
    group_by: str
    chart: BarChart
    rows: list[UsageRow]
    row_heading: str

    @property
    def is_columns(self) -> bool:
        return self.group_by == "day"


def _total_text(rows: Sequence[UsageRow]) -> str:
    return cost_label(sum((row.cost for row in rows), Cost()))


def _ranking_summary(rows: list[UsageRow], what: str, period: str) -> str:
    if not rows:
        return f"No model calls by {what} in {period}."
    top = rows[0]
    return (
        f"Cost by {what} in {period}: {len(rows)} in all, total {_total_text(rows)}; "
        f"the highest is {top.label} with {cost_label(top.cost)}."
    )


def usage_charts(reports: UsageReports) -> list[UsageChart]:
    """Cost and tokens per day, and cost per agent, member and model."""
    period = f"{reports.since:%Y-%m-%d} to {reports.until:%Y-%m-%d}"
    rankings = [
        ("cost-per-agent", "agent", "Agent", reports.agents),
        ("cost-per-member", "member", "Member", reports.members),
        ("cost-per-model", "model", "Model", reports.models),
    ]
    return (
        _day_charts(reports.days, period)
        + [
            UsageChart(
                slug,
                what,
                row_chart(
                    rows,
                    title=f"Cost per {what}",
                    value=lambda row: row.cost_micros,
                    label=lambda row: row.label,
                    value_text=lambda row: cost_label(row.cost),
                    summary=_ranking_summary(rows, what, period),
                ),
                rows,
                heading,
            )
            for slug, what, heading, rows in rankings
        ]
        + token_ranking_charts(reports, period)
    )


def _day_charts(days: list[UsageRow], period: str) -> list[UsageChart]:
    """Cost per day, then tokens per day with the busiest day named."""
    busiest = max(days, key=lambda row: row.total_tokens, default=None)
    token_total = sum(row.total_tokens for row in days)
    busiest_text = f", most on {busiest.key} ({busiest.total_tokens})." if token_total and busiest else "."
    cost_chart = column_chart(
        days,
        title="Cost per day",
        value=lambda row: row.cost_micros,
        label=lambda row: f"{row.key[5:]}",
        value_text=lambda row: cost_label(row.cost) if row.model_calls else "none",
        summary=f"Cost per day from {period}: total {_total_text(days)}.",
    )
    token_chart = column_chart(
        days,
        title="Tokens per day",
        value=lambda row: row.total_tokens,
        label=lambda row: f"{row.key[5:]}",
        value_text=lambda row: f"{row.total_tokens} tokens",
        summary=f"Tokens per day from {period}: {token_total} in all{busiest_text}",
    )
    return [
        UsageChart("cost-per-day", "day", cost_chart, days, "Day"),
        UsageChart("tokens-per-day", "day", token_chart, days, "Day"),
    ]


def token_ranking_charts(reports: UsageReports, period: str) -> list[UsageChart]:
    """Tokens per agent and per member, most first (the cost rankings order by money)."""
    charts = []
    for slug, what, heading, rows in (
        ("tokens-per-agent", "agent", "Agent", reports.agents),
        ("tokens-per-member", "member", "Member", reports.members),
    ):
        ranked = sorted(rows, key=lambda row: (-row.total_tokens, row.label, row.key))
        top = ranked[0] if ranked else None
        summary = (
            f"Tokens by {what} in {period}: {sum(row.total_tokens for row in ranked)} in all; "
            f"the most is {top.label} with {top.total_tokens}."
            if top
            else f"No model calls by {what} in {period}."
        )
        chart = row_chart(
            ranked,
            title=f"Tokens per {what}",
            value=lambda row: row.total_tokens,
            label=lambda row: row.label,
            value_text=lambda row: f"{row.total_tokens} tokens",
            summary=summary,
        )
        charts.append(UsageChart(slug, what, chart, ranked, heading))
    return charts


@dataclass(frozen=True)
class RunChart:
    """Runs or errors per day, agent or member, with the rows it draws (shown as a table beside it)."""

    slug: str
    chart: BarChart
    rows: Sequence[RunDay | RunGroup]
    row_heading: str = "Day"

    @property
    def is_columns(self) -> bool:
        return self.row_heading == "Day"


def _runs_text(runs: int, errors: int) -> str:
    return f"{runs} run{'s' if runs != 1 else ''}" + (f", {errors} failed" if errors else "")


def run_ranking_charts(reports: UsageReports, period: str) -> list[RunChart]:
    """Runs per agent and per member, the busiest first; each bar says how many failed."""
    charts = []
    for what, heading, groups in (
        ("agent", "Agent", reports.run_agents),
        ("member", "Member", reports.run_members),
    ):
        top = groups[0] if groups else None
        summary = (
            f"Runs by {what} in {period}: {sum(group.runs for group in groups)} in all, "
            f"{sum(group.errors for group in groups)} failed; the most is {top.label} with {top.runs}."
            if top
            else f"No runs by {what} in {period}."
        )
        chart = row_chart(
            groups,
            title=f"Runs per {what}",
            value=lambda group: group.runs,
            label=lambda group: group.label,
            value_text=lambda group: _runs_text(group.runs, group.errors),
            summary=summary,
        )
        charts.append(RunChart(f"runs-per-{what}", chart, groups, heading))
    return charts


def run_charts(reports: UsageReports) -> list[RunChart]:
    """Runs and errors (failed or timed out) per day, by the day each run started, then per agent
    and member."""
    period = f"{reports.since:%Y-%m-%d} to {reports.until:%Y-%m-%d}"
    days = reports.run_days
    runs, errors = sum(day.runs for day in days), sum(day.errors for day in days)
    return [
        RunChart(
            "runs-per-day",
            column_chart(
                days,
                title="Runs per day",
                value=lambda day: day.runs,
                label=lambda day: day.key[5:],
                value_text=lambda day: f"{day.runs} run{'s' if day.runs != 1 else ''}",
                summary=f"Runs per day from {period}: {runs} in all.",
            ),
            days,
        ),
        RunChart(
            "errors-per-day",
            column_chart(
                days,
                title="Errors per day",
                value=lambda day: day.errors,
                label=lambda day: day.key[5:],
                value_text=lambda day: f"{day.errors} failed",
                summary=f"Runs that failed or timed out per day from {period}: {errors} of {runs}.",
            ),
            days,
        ),
        *run_ranking_charts(reports, period),
    ]
