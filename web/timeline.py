"""A run's timeline for people: its steps, and its events with streamed text gathered up."""

import json
from dataclasses import dataclass
from typing import Any

from agents.models import Agent
from billing.costs import Cost, run_cost
from sessions.models import Run, RunEvent, Step, ToolApproval
from sessions.selectors import events_for_run, run_get_for_actor
from sessions.state import TERMINAL_RUN_STATUSES
from tenants.actors import Actor

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


def _pretty(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _describe(event: RunEvent) -> tuple[str, str, str]:
    """(summary, detail, tone) of one event."""
    data = event.data or {}
    kind = event.type
    if kind == "run.status":
        reason = f" ({data['stop_reason']})" if data.get("stop_reason") else ""
        return f"Status {data.get('from')} → {data.get('to')}{reason}", "", "info"
    if kind in ("step.started", "step.completed"):
        verb = "started" if kind == "step.started" else data.get("status", "completed")
        tone = "error" if data.get("status") == "failed" else "info"
        return f"Step {data.get('index', 0) + 1} ({data.get('kind', '')}) {verb}", data.get("error", ""), tone
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
            "Question to the user",
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
    if kind == "message.started":
        return "Answer started", "", "info"
    if kind == "message.completed":
        return "Answer completed", "", "info"
    if kind == "compaction":
        return "Context compacted", _pretty(data), "info"
    if kind in ("run.failed", "run.timeout", "error"):
        return kind.replace(".", " ").capitalize(), data.get("error", "") or _pretty(data), "error"
    if kind.startswith("run."):
        return kind.replace(".", " ").capitalize(), data.get("error", ""), "info"
    return kind, _pretty(data) if data else "", "info"


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
    run = Run.objects.select_related("agent", "session", "created_by").get(pk=run.pk)
    config = run.agent_config or {}
    label_agent = Agent(
        model_provider=config.get("model_provider", "offline"), model_name=config.get("model_name", "")
    )
    duration = None
    if run.started_at and run.finished_at:
        duration = (run.finished_at - run.started_at).total_seconds()
    return RunTimeline(
        run=run,
        steps=list(run.steps.order_by("index")),
        entries=timeline_entries(list(events_for_run(run=run))),
        approvals=list(run.approvals.select_related("decided_by")),
        model_label=label_agent.model_label,
        own_cost=run_cost(run),
        is_finished=run.status in TERMINAL_RUN_STATUSES,
        duration_seconds=duration,
    )
