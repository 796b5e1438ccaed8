"""The run and step state machines: one table each, conditional updates, audit events.

Every transition is ``UPDATE … WHERE id = ? AND status = ? AND version = ?``; losing a
race (another worker moved the row first) raises ``StaleTransition`` and changes nothing.
"""

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
    from_status = run.status
    if to_status not in RUN_TRANSITIONS[from_status]:
        raise InvalidTransition(f"run {run.pk}: {from_status} → {to_status} is not allowed")
    now = timezone.now()
    if to_status in TERMINAL_RUN_STATUSES:
        fields.setdefault("finished_at", now)
        fields.setdefault("lease_owner", "")
        fields.setdefault("lease_expires_at", None)
    is_outermost = not connection.in_atomic_block
    # No savepoint when nested: nothing is written unless the conditional update wins.
    with transaction.atomic(savepoint=False), events_batched():
        updated = _guarded_update(Run, run.pk, from_status, run.version, to_status, fields)
        if updated == 1:
            _record_transition(run, from_status, to_status, actor=actor, fields=fields)
            if is_outermost:
                flush_batched_events()  # the audit commits with the change, even inside a batch
    if updated != 1:
        raise StaleTransition(f"run {run.pk} is no longer {from_status} at version {run.version}")
    return run


def _guarded_update(
    model: type[Run] | type[Step],
    pk: Any,
    from_status: str,
    version: int,
    to_status: str,
    fields: dict[str, Any],
) -> int:
    """The transition's one statement: 1 if the row was still at ``from_status`` and ``version``."""
    return update_row(
        model,
        pk,
        values={"status": to_status, **fields},
        increments={"version": 1},
        expected={"status": from_status, "version": version},
    )


def _record_transition(
    run: Run, from_status: str, to_status: str, *, actor: str, fields: dict[str, Any]
) -> None:
    run.status = to_status
    run.version += 1
    for name, value in fields.items():
        setattr(run, name, value)
    audit = transition_audit(from_status, to_status, actor=actor, stop_reason=fields.get("stop_reason", ""))
    emit_event(session_id=run.session_id, run_id=run.pk, event_type="run.status", data=audit)
    if to_status in TERMINAL_RUN_STATUSES:
        _close_open_steps(run)


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
    updated = _guarded_update(Step, step.pk, from_status, step.version, to_status, fields)
    if updated != 1:
        raise StaleTransition(f"step {step.pk} is no longer {from_status} at version {step.version}")
    step.status = to_status
    step.version += 1
    for name, value in fields.items():
        setattr(step, name, value)
    return step
