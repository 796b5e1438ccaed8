"""A run's end: its terminal transition with the event that announces it, and, for a run with
children (executors, sub-agents), the usage and cost of its whole tree."""

from typing import Any

from django.db import transaction

from billing.costs import run_cost
from core.storable import storable_text
from sessions.events import emit_event, events_batched
from sessions.models import Run, RunStatus, StopReason
from sessions.state import (
    TERMINAL_EVENT_TYPES,
    TERMINAL_RUN_STATUSES,
    StaleTransition,
    run_transition_if_current,
)
from sessions.statements.run_reads import reread_fields


def _ending_data(run: Run, status: str, stop_reason: str, error: str) -> dict[str, Any]:
    """The terminal event's data (a parent's tree usage and cost are added by run_finish)."""
    cost = run_cost(run)
    data: dict[str, Any] = {
        "status": status,
        "stop_reason": stop_reason,
        "usage": run.usage,
        "cost": cost.text,
        "unpriced_model_calls": cost.unpriced_calls,
    }
    if error:
        data["error"] = error
    return data


def _tree_usage_record(run: Run) -> dict[str, Any]:
    """The run's usage and cost with its children's, stored on the run, and per child for the event."""
    child_runs = list(Run.objects.filter(parent_run=run).order_by("created_at"))
    children = {str(child.pk): child.usage for child in child_runs}
    run.refresh_from_db(fields=["model_calls", *USAGE_FIELDS, *COST_FIELDS])
    tree = {
        name: getattr(run, name) + sum(usage[name] for usage in children.values()) for name in USAGE_FIELDS
    }
    tree["total_tokens"] = tree["input_tokens"] + tree["output_tokens"]
    # The tree's cost goes with its usage (billing.costs.run_tree_cost reads it back).
    cost = sum((run_cost(child) for child in child_runs), run_cost(run))
    tree["model_calls"] = cost.priced_calls + cost.unpriced_calls
    tree["unpriced_model_calls"] = cost.unpriced_calls
    tree["cost_micros"] = cost.micros
    Run.objects.filter(pk=run.pk).update(tree_usage=tree)
    run.tree_usage = tree
    return {
        "usage": run.usage,
        "tree_usage": tree,
        "children_usage": children,
        "tree_cost": cost.text,
        "tree_unpriced_model_calls": cost.unpriced_calls,
    }


USAGE_FIELDS = ["input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"]
COST_FIELDS = ["cost_micros", "unpriced_model_calls"]
# What changes while a run executes and its end depends on (not its configuration or ids).
FINISH_FIELDS = [
    "status",
    "version",
    "model_calls",
    "lease_owner",
    "lease_expires_at",
    *USAGE_FIELDS,
    *COST_FIELDS,
]


def run_finish(run: Run, *, status: str, stop_reason: str, error: str = "", actor: str = "system") -> Run:
    """Move the run to a terminal state and announce it; a run already finished is left alone.

    The run is read again first (its usage and status change while it runs); a cancel request
    that arrived meanwhile turns a success into ``cancelled``. Inside a transaction (the batch of
    the run's last answer: ``sessions.recorder``) it joins it, with no savepoint: a transition
    that loses to a cancel writes nothing and raises nothing, so the transaction stays usable.
    """
    error = storable_text(error)[:10_000]  # an exception's text can hold what PostgreSQL refuses
    for _ in range(3):
        has_child_runs = reread_fields(run, FINISH_FIELDS)
        if run.status in TERMINAL_RUN_STATUSES:
            return run
        target = status
        if run.status == RunStatus.CANCELLING and status != RunStatus.FAILED:
            target, stop_reason = RunStatus.CANCELLED, StopReason.CANCELLED
        with transaction.atomic(savepoint=False), events_batched():
            fields = {"stop_reason": stop_reason, "error": error}
            if not run_transition_if_current(run, target, actor=actor, **fields):
                continue  # a cancel request moved the run meanwhile: re-read and finish from there
            data = _ending_data(run, target, stop_reason, error)
            if run.parent_run_id is None and has_child_runs:
                data.update(_tree_usage_record(run))
            emit_event(
                session_id=run.session_id,
                run_id=run.pk,
                event_type=TERMINAL_EVENT_TYPES[target],
                data=data,
            )
        return run
    raise StaleTransition(f"run {run.pk} kept changing while finishing")
