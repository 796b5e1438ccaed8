"""Tool-call approvals: the gate the loop asks, and the decisions people (or the TTL) make."""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.runtime.types import ApprovalCheck, ToolCallRequested
from core.redaction import redact_secrets
from core.storable import UNSTORABLE_RULE, is_storable
from sessions.events import emit_event
from sessions.models import (
    ApprovalStatus,
    Message,
    MessageRole,
    QuestionStatus,
    Run,
    StepKind,
    ToolApproval,
    UserQuestion,
)
from sessions.questions import ASK_USER, QuestionAsker
from sessions.state import WAITING_FOR_PEOPLE_STATUSES
from sessions.statements.run_reads import step_count
from sessions.subagents import SPAWN_SUBAGENT, SubagentSpawner
from tools.provider import argument_errors
from tools.registry import RunToolset, toolset_for_run

DECISION_STATES = {"approve": "approved", "deny": "denied"}
APPROVED = ApprovalCheck(state="approved")


class ToolCallGate:
    """Decides each batch of tool calls before any runs: the policy, the call caps, approvals.

    Refusals go back to the model as error results (the run continues); calls that need
    approval pause the run until someone decides, ask_user calls until the user answers.
    """

    def __init__(
        self,
        run: Run,
        toolset: RunToolset,
        *,
        subagents: SubagentSpawner | None = None,
        questions: QuestionAsker | None = None,
    ) -> None:
        self.run = run
        self.toolset = toolset
        self.subagents = subagents
        self.questions = questions

    def check(self, calls: list[ToolCallRequested]) -> dict[str, ApprovalCheck]:
        checks: dict[str, ApprovalCheck] = {}
        calls_so_far = self._count_tool_steps()
        needing_approval = []
        for index, call in enumerate(calls):
            refusal = self._refusal(call, index=index, calls_so_far=calls_so_far)
            if refusal:
                checks[call.id] = ApprovalCheck(state="refused", reason=refusal)
            elif self.toolset.decisions[call.name].requires_approval:
                needing_approval.append(call)
        checks.update(self._approval_checks(needing_approval))
        if self.questions is not None:
            # A question is asked once its call may run: allowed, and approved when it must be.
            asks = [
                call
                for call in calls
                if call.name == ASK_USER and checks.get(call.id, APPROVED).state == "approved"
            ]
            checks.update(self.questions.check(asks))
        if self.subagents is not None:
            # A sub-agent starts only once its call may run: allowed, and approved when it must be.
            spawns = [
                call
                for call in calls
                if call.name == SPAWN_SUBAGENT and checks.get(call.id, APPROVED).state == "approved"
            ]
            checks.update(self.subagents.check(spawns))
        return checks

    def _count_tool_steps(self) -> int:
        return step_count(self.run.pk, kind=StepKind.TOOL_CALL)

    def _refusal(self, call: ToolCallRequested, *, index: int, calls_so_far: int) -> str | None:
        if index >= self.toolset.max_calls_per_turn:
            return f"the limit of {self.toolset.max_calls_per_turn} tool calls per model turn was reached"
        if calls_so_far + index >= self.toolset.max_calls_per_run:
            return f"the limit of {self.toolset.max_calls_per_run} tool calls per run was reached"
        decision = self.toolset.decisions.get(call.name)
        if decision is None:
            return f"there is no tool named {call.name!r} for this agent"
        return None if decision.is_allowed else decision.reason

    def _approval_checks(self, gated: list[ToolCallRequested]) -> dict[str, ApprovalCheck]:
        if not gated:
            return {}
        existing = {
            approval.tool_call_id: approval
            for approval in ToolApproval.objects.filter(run=self.run, tool_call_id__in=[c.id for c in gated])
        }
        return {call.id: _check_for(existing.get(call.id) or self._request(call)) for call in gated}

    def _request(self, call: ToolCallRequested) -> ToolApproval:
        expires_at = timezone.now() + timedelta(seconds=settings.APPROVAL_TTL_SECONDS)
        is_editable = self.toolset.decisions[call.name].allows_argument_edits
        try:
            with transaction.atomic():
                approval = ToolApproval.objects.create(
                    tenant_id=self.run.tenant_id,
                    run=self.run,
                    tool_call_id=call.id,
                    tool_name=call.name,
                    arguments=redact_secrets(call.arguments),
                    arguments_editable=is_editable,
                    expires_at=expires_at,
                )
                emit_event(
                    session_id=self.run.session_id,
                    run_id=self.run.pk,
                    event_type="approval.required",
                    data={
                        "approval_id": str(approval.pk),
                        "tool_call_id": call.id,
                        "name": call.name,
                        "arguments": redact_secrets(call.arguments),
                        "arguments_editable": is_editable,
                        "expires_at": expires_at.isoformat(),
                    },
                )
        except IntegrityError:  # a resumed attempt already asked
            approval = ToolApproval.objects.get(run=self.run, tool_call_id=call.id)
        return approval


def _check_for(approval: ToolApproval) -> ApprovalCheck:
    if approval.status == ApprovalStatus.PENDING:
        return ApprovalCheck(state="pending")
    reason = approval.reason
    if approval.status == ApprovalStatus.EXPIRED:
        reason = reason or "the approval request expired"
    if approval.decision == "approve":
        return ApprovalCheck(state="approved", reason=reason)
    return ApprovalCheck(state="denied", reason=reason)


def approval_decide(
    *,
    approval: ToolApproval,
    decision: str,
    reason: str = "",
    decided_by: object | None = None,
    is_expiry: bool = False,
    edited_arguments: dict[str, Any] | None = None,
) -> bool:
    """Record a decision on a pending approval; False when it was already decided.

    With ``edited_arguments`` (checked by the caller), the call runs with them instead: the
    stored call is rewritten, so the model sees the call that ran.
    """
    now = timezone.now()
    status = ApprovalStatus.EXPIRED if is_expiry else DECISION_STATES[decision]
    with transaction.atomic():
        updated = ToolApproval.objects.filter(pk=approval.pk, status=ApprovalStatus.PENDING).update(
            status=status,
            decision=decision,
            reason=reason[:1000],
            decided_by=decided_by,
            decided_at=now,
            edited_arguments=redact_secrets(edited_arguments) if edited_arguments is not None else None,
        )
        if not updated:
            return False
        data = {
            "approval_id": str(approval.pk),
            "tool_call_id": approval.tool_call_id,
            "decision": decision,
            "status": status,
            "reason": reason,
            "decided_by": getattr(decided_by, "email", None),
            "decided_at": now.isoformat(),
            "arguments_edited": edited_arguments is not None,
        }
        if edited_arguments is not None:
            data["arguments"] = edited_arguments
            _stored_call_replace_arguments(approval, edited_arguments)
        emit_event(
            session_id=approval.run.session_id,
            run_id=approval.run_id,
            event_type="approval.resolved",
            data=data,
        )
    return True


def _stored_call_replace_arguments(approval: ToolApproval, arguments: dict[str, Any]) -> None:
    """The call as the run's transcript holds it now has the approver's arguments."""
    messages = Message.objects.filter(run_id=approval.run_id, role=MessageRole.ASSISTANT).order_by(
        "-created_at"
    )
    for message in messages.only("content"):
        content = [
            {**block, "arguments": arguments}
            if block.get("type") == "tool_call" and block.get("id") == approval.tool_call_id
            else block
            for block in message.content
        ]
        if content != message.content:
            Message.objects.filter(pk=message.pk).update(content=content)
            return


def approval_argument_errors(approval: ToolApproval, arguments: Any) -> list[str]:
    """Why the approver's arguments cannot replace the call's: empty when they can."""
    if not approval.arguments_editable:
        return ["This tool's arguments cannot be edited at approval."]
    if not isinstance(arguments, dict):
        return ["Give the arguments as a JSON object."]
    if not is_storable(arguments):
        return [UNSTORABLE_RULE]
    tool = toolset_for_run(approval.run).tools.get(approval.tool_name)
    if tool is None:
        return ["This tool is no longer available."]
    return argument_errors(tool.input_schema, arguments)


def run_is_waiting_only_on_resolved_requests(run: Run) -> bool:
    """The run waits for people, and every approval it asked for is decided, every question answered."""
    return (
        run.status in WAITING_FOR_PEOPLE_STATUSES
        and not ToolApproval.objects.filter(run=run, status=ApprovalStatus.PENDING).exists()
        and not UserQuestion.objects.filter(run=run, status=QuestionStatus.PENDING).exists()
    )
