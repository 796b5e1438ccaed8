"""Cancelling a run and its executors or sub-agents."""

from functools import partial

from django.db import transaction

from sessions.models import Run, RunStatus, StopReason
from sessions.permissions import require_session_owner_or_admin
from sessions.planning.delivery import run_is_waiting_on_children
from sessions.run_end import run_finish
from sessions.run_host import run_stop_notify
from sessions.state import TERMINAL_RUN_STATUSES, WAITING_FOR_PEOPLE_STATUSES, StaleTransition, run_transition
from tenants.actors import Actor


def run_cancel(*, actor: Actor, run: Run) -> Run:
    """Cancel a queued run at once; ask an active one to stop (its loop notices within a second)."""
    require_session_owner_or_admin(actor, run.session)
    actor_label = f"user:{actor.user_id}"
    run = _run_cancel_one(run, actor_label=actor_label)
    for child in Run.objects.filter(parent_run=run).exclude(status__in=TERMINAL_RUN_STATUSES):
        _run_cancel_one(child, actor_label=actor_label)
    return run


def _run_cancel_one(run: Run, *, actor_label: str) -> Run:
    """One run of a cancel; a parent waiting on executors (no worker holds it) ends at once."""
    for _ in range(5):
        if run.status == RunStatus.EXECUTING and run_is_waiting_on_children(run):
            return run_finish(
                run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED, actor=actor_label
            )
        if run.status in TERMINAL_RUN_STATUSES or run.status == RunStatus.CANCELLING:
            return run
        # No worker holds a run that is queued or waits for people: the cancel ends it here.
        if run.status in (RunStatus.QUEUED, RunStatus.CREATED, *WAITING_FOR_PEOPLE_STATUSES):
            return run_finish(
                run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED, actor=actor_label
            )
        try:
            run_transition(run, RunStatus.CANCELLING, actor=actor_label)
        except StaleTransition:
            run.refresh_from_db()  # the worker moved it meanwhile; decide again from its new state
            continue
        transaction.on_commit(partial(run_stop_notify, run.pk))
        return run
    raise StaleTransition(f"run {run.pk} kept changing while cancelling")
