"""A run's work on a time axis: each model call, tool call, child run and wait as a bar.

Geometry is in percent of the run's span (from its start to its end, or to now while it runs), so
the page draws it at any width without script. Bars are drawn in the order they started.
"""

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.urls import reverse

from sessions.models import Run, RunEvent, Step
from sessions.tool_outcomes import step_display_status

# A bar is never drawn thinner than this (percent of the axis), so an instant still shows.
MIN_WIDTH_PERCENT = 0.5
# Statuses a run waits in for a person; one not listed here but named "awaiting_…" still shows.
WAIT_LABELS = {
    "awaiting_approval": "Waiting for approval",
    "awaiting_input": "Waiting for an answer",
}
STEP_LABELS = {"model_call": "Model call", "tool_call": "Tool call", "plan": "Plan step"}


@dataclass(frozen=True)
class Span:
    """One thing the run did, in absolute time (``end`` None: still going)."""

    kind: str
    label: str
    status: str
    start: datetime
    end: datetime | None
    href: str = ""


@dataclass(frozen=True)
class WaterfallBar:
    kind: str
    label: str
    status: str
    href: str
    offset_percent: float
    width_percent: float
    starts_after_seconds: float
    duration_seconds: float
    is_open: bool


@dataclass(frozen=True)
class Waterfall:
    bars: list[WaterfallBar]
    total_seconds: float


def step_label(step: Step, model_call_number: int) -> str:
    if step.kind == "model_call":
        purpose = (step.input or {}).get("purpose")
        suffix = f" ({str(purpose).replace('_', ' ')})" if purpose else ""
        return f"Model call {model_call_number}{suffix}"
    if step.kind == "tool_call":
        return f"Tool: {(step.input or {}).get('name') or 'unnamed'}"
    return STEP_LABELS.get(step.kind, step.kind.replace("_", " ").capitalize())


def step_spans(steps: Iterable[Step]) -> list[Span]:
    """The steps that started (a pending one has no place on the axis yet)."""
    spans = []
    model_calls = 0
    for step in steps:
        if step.kind == "model_call":
            model_calls += 1
        if step.started_at is None:
            continue
        label = step_label(step, model_calls)
        spans.append(Span(step.kind, label, step_display_status(step), step.started_at, step.finished_at))
    return spans


def child_run_kind(run: Run) -> str:
    """What a child run is to its parent: a sub-agent (started by a tool call) or a plan's executor."""
    return "Sub-agent" if run.parent_tool_call_id else "Executor"


def child_spans(children: Iterable[Run]) -> list[Span]:
    """Executors and sub-agents, each linking to its own run page."""
    spans = []
    for child in children:
        kind = child_run_kind(child)
        label = f"{kind}: {child.title}" if child.title else kind
        start = child.started_at or child.created_at
        href = reverse("web:run-detail", kwargs={"run_id": child.pk})
        spans.append(Span("child_run", label, child.status, start, child.finished_at, href))
    return spans


def wait_spans(events: Iterable[RunEvent]) -> list[Span]:
    """Waits for a person, from the run.status events: entering an awaiting_… status to leaving it."""
    spans = []
    waiting: tuple[str, datetime] | None = None
    for event in events:
        if event.type != "run.status":
            continue
        data: dict[str, Any] = event.data or {}
        to_status = str(data.get("to", ""))
        if waiting is not None and to_status != waiting[0]:
            spans.append(_wait_span(waiting[0], waiting[1], event.created_at))
            waiting = None
        if waiting is None and to_status.startswith("awaiting_"):
            waiting = (to_status, event.created_at)
    if waiting is not None:
        spans.append(_wait_span(waiting[0], waiting[1], None))
    return spans


def _wait_span(status: str, start: datetime, end: datetime | None) -> Span:
    label = WAIT_LABELS.get(status, "Waiting (" + status.removeprefix("awaiting_").replace("_", " ") + ")")
    return Span("wait", label, "completed" if end else "running", start, end)


def waterfall_layout(spans: list[Span], *, start: datetime, end: datetime) -> Waterfall:
    """Place the spans on the axis from ``start`` to ``end``; open spans run to ``end``."""
    ordered = sorted(spans, key=lambda span: span.start)
    origin = min([start, *(span.start for span in ordered)])
    finish = max([end, *(span.end for span in ordered if span.end)])
    total = max((finish - origin).total_seconds(), 0.001)
    bars = []
    for span in ordered:
        span_end = span.end or finish
        offset = (span.start - origin).total_seconds()
        duration = max((span_end - span.start).total_seconds(), 0.0)
        width = max(100 * duration / total, MIN_WIDTH_PERCENT)
        offset_percent = min(100 * offset / total, 100 - width)
        bars.append(
            WaterfallBar(
                kind=span.kind,
                label=span.label,
                status=span.status,
                href=span.href,
                offset_percent=round(offset_percent, 2),
                width_percent=round(width, 2),
                starts_after_seconds=round(offset, 3),
                duration_seconds=round(duration, 3),
                is_open=span.end is None,
            )
        )
    return Waterfall(bars=bars, total_seconds=round(total, 3))
