"""A run's timeline for people: its steps, and its events with streamed text gathered up."""

import json
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from agents.models import Agent
from billing.costs import Cost, run_cost
from sessions.models import Run, RunEvent, Step, ToolApproval
from sessions.selectors import events_for_run, run_get_for_actor
from sessions.state import TERMINAL_RUN_STATUSES
from tenants.actors import Actor
from web.templatetags.agentry import status_label
from web.waterfall import (
    Waterfall,
    child_run_kind,
    child_spans,
    step_spans,
    wait_spans,
    waterfall_layout,
)

DELTA_TYPES = {"text.delta": "Text streamed", "reasoning.delta": "Reasoning streamed"}


@dataclass
class TimelineEntry:
    first_seq: int
    last_seq: int
    type: str
    created_at: Any
    summary: str
    detail: str = ""
    tone: str = "info"
    count: int = 1


@dataclass(frozen=True)
class ChildRow:
    """One executor or sub-agent as its parent's page lists it."""

    run: Run
    kind: str


@dataclass(frozen=True)
class RunTimeline:
    run: Run
    steps: list[Step]
    entries: list[TimelineEntry]
    approvals: list[ToolApproval]
    model_label: str
    # The run's own model calls; the page's total (the cost filter) adds its children's.
    own_cost: Cost
    is_finished: bool
    duration_seconds: float | None
    waterfall: Waterfall
    # A child run's parent (a plan, or the run whose tool call started a sub-agent): its page links back.
    parent: Run | None
    # What the run is to its parent ("Executor", "Sub-agent"); empty for a top-level run.
    kind: str
    children: list[ChildRow]
    # Tokens of the run with its executors' and sub-agents' (its own when it has none).
    total_tokens: int


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


# Every event type of the wire contract (sessions.events.EVENT_TYPES), as people read it.
EVENT_LABELS = {
    "run.queued": "Run queued",
    "run.started": "Run started",
    "run.status": "Status changed",
    "run.completed": "Run completed",
    "run.failed": "Run failed",
    "run.cancelled": "Run cancelled",
    "run.timeout": "Run timed out",
    "step.started": "Step started",
    "step.completed": "Step finished",
    "message.started": "Answer started",
    "text.delta": "Text streamed",
    "reasoning.delta": "Reasoning streamed",
    "message.completed": "Answer completed",
    "tool.call": "Tool call",
    "tool.result": "Tool result",
    "approval.required": "Approval required",
    "approval.resolved": "Approval decided",
    "input.required": "Question to the user",
    "input.resolved": "Question answered",
    "plan.created": "Plan created",
    "plan.updated": "Plan updated",
    "compaction": "Context compacted",
    "usage": "Usage",
    "error": "Error",
    "artifact.created": "File created",
}
# A run that waits on its children gives its worker back: executing → executing says only that.
SELF_TRANSITION_TEXT = "Released its worker while waiting for its executors or sub-agents"


def event_label(event_type: str) -> str:
    """The event's human name; a type newer than this table still reads as words."""
    return EVENT_LABELS.get(event_type) or event_type.replace(".", " ").replace("_", " ").capitalize()


def _status_summary(data: dict[str, Any]) -> str:
    before, after = data.get("from"), data.get("to")
    if before == after:
        return SELF_TRANSITION_TEXT
    reason = f" ({status_label(str(data['stop_reason']))})" if data.get("stop_reason") else ""
    return f"Status {status_label(str(before))} → {status_label(str(after))}{reason}"


def _step_summary(event: RunEvent, data: dict[str, Any]) -> tuple[str, str, str]:
    kind = str(data.get("kind", "")).replace("_", " ")
    number = int(data.get("index", 0)) + 1
    if event.type == "step.started":
        return f"Step {number} started ({kind})", "", "info"
    tone = "error" if data.get("status") == "failed" else "info"
    return f"Step {number} {data.get('status', 'completed')} ({kind})", data.get("error", ""), tone


def _plan_summary(event: RunEvent, data: dict[str, Any]) -> tuple[str, str, str]:
    steps = data.get("steps")
    count = f": {len(steps)} step{'s' if len(steps) != 1 else ''}" if isinstance(steps, list) else ""
    reason = f" ({str(data['reason']).replace('_', ' ')})" if data.get("reason") else ""
    return f"{event_label(event.type)}{count}{reason}", _pretty(data) if data else "", "info"


def _describe(event: RunEvent) -> tuple[str, str, str]:
    """(summary, detail, tone) of one event."""
    data = event.data or {}
    kind = event.type
    label = event_label(kind)
    if kind == "run.status":
        return _status_summary(data), "", "info"
    if kind in ("step.started", "step.completed"):
        return _step_summary(event, data)
    if kind in ("plan.created", "plan.updated"):
        return _plan_summary(event, data)
    if kind == "tool.call":
        return f"Tool call: {data.get('name')}", _pretty(data.get("arguments", {})), "tool"
    if kind == "tool.result":
        failed = bool(data.get("is_error"))
        verb = "failed" if failed else "returned"
        return (
            f"Tool {data.get('name')} {verb}",
            _pretty(data.get("content", "")),
            "error" if failed else "tool",
        )
    if kind == "approval.required":
        return f"Approval required: {data.get('name')}", _pretty(data.get("arguments", {})), "approval"
    if kind == "approval.resolved":
        who = f" by {data['decided_by']}" if data.get("decided_by") else ""
        edited = " with edited arguments" if data.get("arguments_edited") else ""
        detail = _pretty(data["arguments"]) if data.get("arguments_edited") else data.get("reason", "")
        return f"Approval {data.get('status', data.get('decision'))}{who}{edited}", detail, "approval"
    if kind == "input.required":
        choices = data.get("choices") or []
        return (
            event_label(kind),
            data.get("question", "") + (f" ({' / '.join(choices)})" if choices else ""),
            "approval",
        )
    if kind == "input.resolved":
        who = f" by {data['answered_by']}" if data.get("answered_by") else ""
        return f"Question {data.get('status', 'answered')}{who}", data.get("answer", ""), "approval"
    if kind == "usage":
        usage = data.get("usage", {})
        return (
            f"Usage: {usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens",
            "",
            "info",
        )
    if kind in ("run.failed", "run.timeout", "error"):
        return label, data.get("error", "") or _pretty(data), "error"
    if kind.startswith("run.") or kind in ("message.started", "message.completed"):
        return label, data.get("error", ""), "info"
    return label, _pretty(data) if data else "", "info"


def timeline_entries(events: list[RunEvent]) -> list[TimelineEntry]:
    entries: list[TimelineEntry] = []
    for event in events:
        last = entries[-1] if entries else None
        if event.type in DELTA_TYPES:
            text = str((event.data or {}).get("text", ""))
            if last is not None and last.type == event.type:
                last.detail += text
                last.last_seq = event.seq
                last.count += 1
                continue
            entries.append(
                TimelineEntry(
                    event.seq, event.seq, event.type, event.created_at, DELTA_TYPES[event.type], text
                )
            )
            continue
        summary, detail, tone = _describe(event)
        entries.append(
            TimelineEntry(event.seq, event.seq, event.type, event.created_at, summary, detail, tone)
        )
    return entries


def run_timeline(*, actor: Actor, run_id: Any) -> RunTimeline:
    run = run_get_for_actor(actor=actor, run_id=run_id)
    run = Run.objects.select_related("agent", "session", "created_by", "parent_run").get(pk=run.pk)
    config = run.agent_config or {}
    label_agent = Agent(
        model_provider=config.get("model_provider", "offline"), model_name=config.get("model_name", "")
    )
    duration = None
    if run.started_at and run.finished_at:
        duration = (run.finished_at - run.started_at).total_seconds()
    steps = list(run.steps.order_by("index"))
    events = list(events_for_run(run=run))
    children = list(Run.objects.filter(parent_run=run).order_by("created_at"))
    return RunTimeline(
        run=run,
        steps=steps,
        entries=timeline_entries(events),
        approvals=list(run.approvals.select_related("decided_by")),
        model_label=label_agent.model_label,
        own_cost=run_cost(run),
        is_finished=run.status in TERMINAL_RUN_STATUSES,
        duration_seconds=duration,
        waterfall=waterfall_layout(
            step_spans(steps) + child_spans(children) + wait_spans(events),
            start=run.started_at or run.created_at,
            end=run.finished_at or timezone.now(),
        ),
        parent=run.parent_run,
        kind=child_run_kind(run) if run.parent_run_id else "",
        children=[ChildRow(run=child, kind=child_run_kind(child)) for child in children],
        total_tokens=run.usage["total_tokens"] + sum(child.usage["total_tokens"] for child in children),
    )
