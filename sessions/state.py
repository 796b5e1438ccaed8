"""The run and step state machines: one table each, conditional updates, audit events.

Every transition is ``UPDATE … WHERE id = ? AND status = ? AND version = ?``; losing a
race (another worker moved the row first) changes nothing: ``run_transition`` raises
``StaleTransition``, ``run_transition_if_current`` answers False and ``run_moves`` None (for
callers inside a transaction, which an exception raised through it would doom).
"""

from collections.abc import Sequence
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from sessions.events import emit_event, events_batched, flush_batched_events
from sessions.models import Run, RunStatus, Step, StepStatus
from sessions.statements.writes import close_open_steps, update_row

S = RunStatus
RUN_TRANSITIONS: dict[str, frozenset[str]] = {
    S.CREATED: frozenset({S.QUEUED, S.CANCELLED}),
    S.QUEUED: frozenset({S.PLANNING, S.CANCELLED, S.FAILED}),
    S.PLANNING: frozenset(
        {S.EXECUTING, S.QUEUED, S.CANCELLING, S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMEOUT}
    ),
    # executing → executing: a run that waits on its sub-agents gives its lease (and worker) back.
    S.EXECUTING: frozenset(
        {
            S.EXECUTING,
            S.AWAITING_APPROVAL,
            S.AWAITING_INPUT,
            S.QUEUED,
            S.CANCELLING,
            S.COMPLETED,
            S.FAILED,
            S.CANCELLED,
            S.TIMEOUT,
        }
    ),
    S.AWAITING_APPROVAL: frozenset({S.EXECUTING, S.QUEUED, S.CANCELLING, S.FAILED, S.CANCELLED, S.TIMEOUT}),
    # Waits for the user's answer to an ask_user call, like an approval: no worker holds the run.
    S.AWAITING_INPUT: frozenset({S.EXECUTING, S.QUEUED, S.CANCELLING, S.FAILED, S.CANCELLED, S.TIMEOUT}),
    S.CANCELLING: frozenset({S.CANCELLED, S.FAILED}),
    S.COMPLETED: frozenset(),
    S.FAILED: frozenset(),
    S.CANCELLED: frozenset(),
    S.TIMEOUT: frozenset(),
}
TERMINAL_RUN_STATUSES = frozenset({S.COMPLETED, S.FAILED, S.CANCELLED, S.TIMEOUT})
ACTIVE_RUN_STATUSES = frozenset(
    {S.PLANNING, S.EXECUTING, S.AWAITING_APPROVAL, S.AWAITING_INPUT, S.CANCELLING}
)
# A run that waits for people (approvals, answers): no worker holds it, a cancel ends it at once.
WAITING_FOR_PEOPLE_STATUSES = frozenset({S.AWAITING_APPROVAL, S.AWAITING_INPUT})
TERMINAL_EVENT_TYPES: dict[str, str] = {
    S.COMPLETED: "run.completed",
    S.FAILED: "run.failed",
    S.CANCELLED: "run.cancelled",
    S.TIMEOUT: "run.timeout",
}

T = StepStatus
STEP_TRANSITIONS: dict[str, frozenset[str]] = {
    T.PENDING: frozenset({T.RUNNING, T.SKIPPED, T.CANCELLED}),
    T.RUNNING: frozenset({T.COMPLETED, T.FAILED, T.CANCELLED}),
    T.COMPLETED: frozenset(),
    T.FAILED: frozenset(),
    T.SKIPPED: frozenset(),
    T.CANCELLED: frozenset(),
}
OPEN_STEP_STATUSES = frozenset({T.PENDING, T.RUNNING})


class InvalidTransition(Exception):
    """The state machine does not allow this move."""


class StaleTransition(Exception):
    """The row changed since it was read: another worker or request moved it first."""


def run_transition(run: Run, to_status: str, *, actor: str = "system", **fields: Any) -> Run:
    """Move ``run`` to ``to_status`` (updating ``run`` in place) and audit it as a run.status event."""
    from_status, version = run.status, run.version
    if not run_transition_if_current(run, to_status, actor=actor, **fields):
        raise StaleTransition(f"run {run.pk} is no longer {from_status} at version {version}")
    return run


def run_transition_if_current(run: Run, to_status: str, *, actor: str = "system", **fields: Any) -> bool:
    """``run_transition``, answering False when another worker or request moved the run first.

    Nothing is written then, and nothing is raised through the transaction: a caller inside one
    (the run's end with its last answer, ``sessions.run_end``) can read again and go on in it.
    """
    require_run_transition(run.status, to_status, run=run)  # raised before anything is written
    is_outermost = not connection.in_atomic_block
    # No savepoint when nested: nothing is written unless the conditional update wins.
    with transaction.atomic(savepoint=False), events_batched():
        audits = run_moves(run, [to_status], actor=actor, **fields)
        if audits is None:
            return False
        for audit in audits:
            emit_run_status(run, audit)
        if to_status in TERMINAL_RUN_STATUSES:
            _close_open_steps(run)
        if is_outermost:
            flush_batched_events()  # the audit commits with the change, even inside a batch
    return True


def run_moves(
    run: Run, path: Sequence[str], *, actor: str = "system", **fields: Any
) -> list[dict[str, str]] | None:
    """Move ``run`` along ``path``, each move allowed by the table, in one guarded update (the claim's
    queued → planning → executing is one statement), updating ``run`` in place.

    Returns each move's audit, the data of the run.status events to emit in order with the change;
    None when another worker or request moved the run first (nothing is written then).
    """
    moves = list(zip([run.status, *path[:-1]], path, strict=True))
    for from_status, to_status in moves:
        require_run_transition(from_status, to_status, run=run)
    final_status = path[-1]
    if final_status in TERMINAL_RUN_STATUSES:
        fields.setdefault("finished_at", timezone.now())
        fields.setdefault("lease_owner", "")
        fields.setdefault("lease_expires_at", None)
    updated = update_row(
        Run,
        run.pk,
        values={"status": final_status, **fields},
        increments={"version": len(moves)},
        expected={"status": run.status, "version": run.version},
    )
    if updated != 1:
        return None
    run.status = final_status
    run.version += len(moves)
    for name, value in fields.items():
        setattr(run, name, value)
    audits = [transition_audit(from_status, to_status, actor=actor) for from_status, to_status in moves]
    if fields.get("stop_reason"):
        audits[-1]["stop_reason"] = fields["stop_reason"]
    return audits


def require_run_transition(from_status: str, to_status: str, *, run: Run) -> None:
    if to_status not in RUN_TRANSITIONS[from_status]:
        raise InvalidTransition(f"run {run.pk}: {from_status} → {to_status} is not allowed")


def emit_run_status(run: Run, audit: dict[str, str]) -> None:
    emit_event(session_id=run.session_id, run_id=run.pk, event_type="run.status", data=audit)


def transition_audit(
    from_status: str, to_status: str, *, actor: str, stop_reason: str = ""
) -> dict[str, str]:
    """The data of a run.status event."""
    audit = {"from": from_status, "to": to_status, "actor": actor}
    if stop_reason:
        audit["stop_reason"] = stop_reason
    return audit


def _close_open_steps(run: Run) -> None:
    """A finished run leaves no step pending or running."""
    close_open_steps(
        run.pk, open_statuses=OPEN_STEP_STATUSES, to_status=StepStatus.CANCELLED, finished_at=timezone.now()
    )


def require_step_transition(step: Step, to_status: str) -> None:
    if to_status not in STEP_TRANSITIONS[step.status]:
        raise InvalidTransition(f"step {step.pk}: {step.status} → {to_status} is not allowed")


def step_transition(step: Step, to_status: str, **fields: Any) -> Step:
    from_status = step.status
    require_step_transition(step, to_status)
    updated = update_row(
        Step,
        step.pk,
        values={"status": to_status, **fields},
        increments={"version": 1},
        expected={"status": from_status, "version": step.version},
    )
    if updated != 1:
        raise StaleTransition(f"step {step.pk} is no longer {from_status} at version {step.version}")
    step.status = to_status
    step.version += 1
    for name, value in fields.items():
        setattr(step, name, value)
    return step
