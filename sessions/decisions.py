"""People's answers to a waiting run: approving a tool call, answering an ask_user question."""

from typing import Any

from django.core.exceptions import ValidationError

from sessions.approvals import (
    approval_argument_errors,
    approval_decide,
    run_is_waiting_only_on_resolved_requests,
)
from sessions.models import Run, RunStatus, ToolApproval, UserQuestion
from sessions.permissions import require_session_owner_or_admin
from sessions.questions import question_resolve
from sessions.state import TERMINAL_RUN_STATUSES
from sessions.sweeper import run_resume
from tenants.actors import Actor


def run_approve(
    *,
    actor: Actor,
    run: Run,
    tool_call_id: str,
    decision: str,
    reason: str = "",
    arguments: dict[str, Any] | None = None,
) -> ToolApproval:
    """Decide a pending tool call; once nothing is pending the run continues.

    ``arguments`` replace the call's when the tool policy lets the approver edit them.
    """
    require_session_owner_or_admin(actor, run.session)
    approval = ToolApproval.objects.filter(run=run, tool_call_id=tool_call_id).select_related("run").first()
    if approval is None:
        raise ValidationError({"tool_call_id": ["No approval is pending for this tool call."]})
    if run.status in TERMINAL_RUN_STATUSES or run.status == RunStatus.CANCELLING:
        raise ValidationError(
            {"tool_call_id": [f"This run is {run.status}: it no longer waits for a decision."]}
        )
    if arguments is not None:
        _require_editable_arguments(approval, decision, arguments)
    if not approval_decide(
        approval=approval, decision=decision, reason=reason, decided_by=actor.user, edited_arguments=arguments
    ):
        raise ValidationError({"tool_call_id": [f"This tool call was already {approval.status}."]})
    run.refresh_from_db()
    if run_is_waiting_only_on_resolved_requests(run):
        run_resume(run=run)
    approval.refresh_from_db()
    return approval


def _require_editable_arguments(approval: ToolApproval, decision: str, arguments: dict[str, Any]) -> None:
    if decision != "approve":
        raise ValidationError({"arguments": ["Only an approval can change the arguments."]})
    if errors := approval_argument_errors(approval, arguments):
        raise ValidationError({"arguments": errors})


def run_answer(*, actor: Actor, run: Run, tool_call_id: str, answer: str) -> UserQuestion:
    """Answer the run's pending ask_user question; once nothing is pending the run continues."""
    require_session_owner_or_admin(actor, run.session)
    question = UserQuestion.objects.filter(run=run, tool_call_id=tool_call_id).select_related("run").first()
    if question is None:
        raise ValidationError({"tool_call_id": ["No question was asked with this tool call."]})
    if run.status in TERMINAL_RUN_STATUSES or run.status == RunStatus.CANCELLING:
        raise ValidationError(
            {"tool_call_id": [f"This run is {run.status}: it no longer waits for an answer."]}
        )
    if not answer.strip():
        raise ValidationError({"answer": ["The answer is empty."]})
    if question.choices and answer not in question.choices:
        raise ValidationError({"answer": ["Pick one of the choices: " + ", ".join(question.choices) + "."]})
    if not question_resolve(question=question, answer=answer, answered_by=actor.user):
        question.refresh_from_db()
        raise ValidationError({"tool_call_id": [f"This question was already {question.status}."]})
    run.refresh_from_db()
    if run_is_waiting_only_on_resolved_requests(run):
        run_resume(run=run)
    question.refresh_from_db()
    return question
