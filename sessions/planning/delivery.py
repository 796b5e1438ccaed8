"""Durable delivery of executor results: the parent continues from database state, never a callback."""

from uuid import UUID

from sessions.models import Run, RunStatus
from sessions.state import TERMINAL_RUN_STATUSES, StaleTransition, run_transition


def run_is_waiting_on_children(run: Run) -> bool:
    """A planning run between dispatching executors and continuing: executing, no worker holds it."""
    return run.status == RunStatus.EXECUTING and not run.lease_owner and run.children.exists()


def parent_resume_when_children_done(*, parent_id: UUID) -> bool:
    """Queue the parent again once none of its children is open; True when this call queued it.

    Called after every child run ends (by its task) and by the sweeper; the conditional
    transition makes concurrent callers harmless.
    """
    parent = Run.objects.filter(pk=parent_id).first()
    if parent is None or not run_is_waiting_on_children(parent):
        return False
    if Run.objects.filter(parent_run=parent).exclude(status__in=TERMINAL_RUN_STATUSES).exists():
        return False
    try:
        run_transition(parent, RunStatus.QUEUED, actor="children")
    except StaleTransition:
        return False
    return True


def waiting_parent_ids() -> list[UUID]:
    """Planning runs waiting on children, for the sweeper's check that none was forgotten."""
    return list(
        Run.objects.filter(status=RunStatus.EXECUTING, lease_owner="", children__isnull=False)
        .values_list("id", flat=True)
        .distinct()
    )
