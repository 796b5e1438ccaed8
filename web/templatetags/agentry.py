"""Template helpers for the pages: roles, status colours, numbers, money, JSON."""

import json
from typing import Any

from django import template

from billing.costs import Cost, cost_label, run_total_cost, step_cost
from billing.pricing import credits_text
from billing.usage import UsageRow
from sessions.models import Run, Session, Step
from sessions.serializers import SessionLaneMixin
from sessions.tool_outcomes import step_display_status
from tenants.actors import Actor
from web.forms.settings import LIMIT_LABELS
from web.selectors import memberships_of_user

register = template.Library()

TONES = {
    # runs and sessions
    "completed": "ok",
    "idle": "muted",
    "queued": "info",
    "created": "info",
    "planning": "busy",
    "executing": "busy",
    "running": "busy",
    "cancelling": "warn",
    "awaiting_approval": "warn",
    "awaiting_input": "warn",
    "failed": "error",
    "timeout": "error",
    "cancelled": "muted",
    # tool calls (sessions.tool_outcomes)
    "done": "ok",
    "error": "error",
    "denied": "muted",
    "skipped": "muted",
    # MCP health
    "healthy": "ok",
    "degraded": "warn",
    "down": "error",
    "unknown": "muted",
    # memories and keys
    "active": "ok",
    "suggested": "warn",
    "rejected": "muted",
    "archived": "muted",
    "revoked": "muted",
    "expired": "muted",
    # files
    "processing": "busy",
    "ready": "ok",
}
STATUS_LABELS = {
    "awaiting_approval": "awaiting approval",
    "awaiting_input": "waiting for your answer",
    "end_turn": "end of turn",
    "no_price": "no price for this model",
}


@register.filter
def can(actor: Actor | None, role: str) -> bool:
    return actor is not None and actor.can(role)


@register.filter
def tone(status: str) -> str:
    return TONES.get(str(status), "muted")


@register.filter
def step_status(step: Step) -> str:
    """What a step's badge says: a tool call's outcome (sessions.tool_outcomes)."""
    return step_display_status(step)


@register.filter
def status_label(status: str) -> str:
    text = str(status)
    return STATUS_LABELS.get(text, text.replace("_", " "))


@register.filter
def session_status(session: Session) -> str:
    return SessionLaneMixin().get_status(session)


@register.filter
def tokens(value: int | None) -> str:
    """1234 → "1.2k", 2500000 → "2.5M"."""
    number = int(value or 0)
    if number >= 1_000_000:
        return f"{number / 1_000_000:.1f}M"
    if number >= 10_000:
        return f"{number / 1000:.0f}k"
    if number >= 1000:
        return f"{number / 1000:.1f}k"
    return str(number)


@register.filter
def cost(value: Cost | Run | Step | UsageRow | None) -> str:
    """Money as every page shows it ("$0.0042", "≥ $0.0042 (1 call without a price)", "price
    unknown"): a run's answer with its executors and sub-agents, a step ("" for no model call)."""
    if isinstance(value, Run):
        value = run_total_cost(value)
    elif isinstance(value, Step):
        value = step_cost(value)
    elif isinstance(value, UsageRow):
        value = value.cost
    return cost_label(value) if value is not None else ""


@register.filter
def total_tokens(run: Run) -> int:
    """A run's tokens with its executors' and sub-agents' (stored when it finished), else its own."""
    tree = run.tree_usage or {}
    return int(tree.get("total_tokens", run.usage["total_tokens"]))


@register.filter
def pretty_json(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


@register.filter
def limit_label(name: str) -> str:
    return LIMIT_LABELS.get(name, name)


@register.filter
def percent(value: float | None) -> int:
    return round(float(value or 0) * 100)


@register.inclusion_tag("web/_tenant_switcher.html", takes_context=True)
def tenant_switcher(context: template.Context) -> dict[str, Any]:
    actor = context.get("actor")
    if actor is None:
        return {"actor": None, "memberships": []}
    return {
        "actor": actor,
        "memberships": list(memberships_of_user(user=actor.user)),
        "csrf_token": context.get("csrf_token"),
    }


@register.simple_tag(takes_context=True)
def nav_current(context: template.Context, prefix: str) -> str:
    """ "page" for the navigation link of the section being shown (``aria-current``), else ""."""
    request = context.get("request")
    path = getattr(request, "path", "")
    is_current = path == "/" if prefix == "/" else path.startswith(prefix)
    return "page" if is_current else ""


@register.filter
def credits(micros: int | None) -> str:
    """Micro-credits as credits with six places, exactly as the ledger counts them."""
    return credits_text(int(micros or 0))
