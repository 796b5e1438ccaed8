"""ask_user: the agent asks the user a question and the run waits, as it does for an approval.

The tool gate (sessions.approvals.ToolCallGate) asks: it stores a ``UserQuestion`` and emits
``input.required``, and the run gives its worker back (``awaiting_input``). The answer (or the
TTL, through the sweeper) resolves the question and queues the run again; the resumed loop
replays its last turn and the tool only reads the stored answer, which the model receives as
the call's result.
"""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.runtime.types import ApprovalCheck, ToolCallRequested
from sessions.events import emit_event
from sessions.models import QuestionStatus, Run, UserQuestion
from tools.provider import argument_errors

ASK_USER = "ask_user"
ASKING = ApprovalCheck(state="asking")
# What the model receives when nobody answered in time: it carries on without the answer.
NO_ANSWER_RESULT = "The user did not answer within the time allowed. Carry on without their answer."


class QuestionAsker:
    """The tool gate's part for ask_user calls: ask each once, and hold the run until answered."""

    def __init__(self, run: Run, input_schema: dict[str, Any]) -> None:
        self.run = run
        self.input_schema = input_schema

    def check(self, calls: list[ToolCallRequested]) -> dict[str, ApprovalCheck]:
        """``asking`` for unanswered questions; answered and expired ones are left out (the tool answers)."""
        if not calls:
            return {}
        existing = {
            question.tool_call_id: question
            for question in UserQuestion.objects.filter(run=self.run, tool_call_id__in=[c.id for c in calls])
        }
        checks: dict[str, ApprovalCheck] = {}
        for call in calls:
            question = existing.get(call.id)
            if question is None:
                if errors := argument_errors(self.input_schema, call.arguments):
                    checks[call.id] = ApprovalCheck(
                        state="refused", reason="invalid arguments: " + "; ".join(errors)
                    )
                    continue
                question = self._ask(call)
            if question.status == QuestionStatus.PENDING:
                checks[call.id] = ASKING
        return checks

    def _ask(self, call: ToolCallRequested) -> UserQuestion:
        expires_at = timezone.now() + timedelta(seconds=settings.ASK_USER_TTL_SECONDS)
        choices = [str(choice) for choice in call.arguments.get("choices") or []]
        try:
            with transaction.atomic():
                question = UserQuestion.objects.create(
                    tenant_id=self.run.tenant_id,
                    run=self.run,
                    tool_call_id=call.id,
                    question=str(call.arguments["question"]).strip(),
                    choices=choices,
                    expires_at=expires_at,
                )
                emit_event(
                    session_id=self.run.session_id,
                    run_id=self.run.pk,
                    event_type="input.required",
                    data={
                        "question_id": str(question.pk),
                        "tool_call_id": call.id,
                        "question": question.question,
                        "choices": choices,
                        "expires_at": expires_at.isoformat(),
                    },
                )
        except IntegrityError:  # a resumed attempt already asked
            question = UserQuestion.objects.get(run=self.run, tool_call_id=call.id)
        return question


def question_resolve(
    *, question: UserQuestion, answer: str = "", answered_by: object | None = None, is_expiry: bool = False
) -> bool:
    """Record the answer to a pending question (or its expiry); False when it was already resolved."""
    now = timezone.now()
    status = QuestionStatus.EXPIRED if is_expiry else QuestionStatus.ANSWERED
    with transaction.atomic():
        updated = UserQuestion.objects.filter(pk=question.pk, status=QuestionStatus.PENDING).update(
            status=status, answer=answer, answered_by=answered_by, answered_at=now
        )
        if not updated:
            return False
        emit_event(
            session_id=question.run.session_id,
            run_id=question.run_id,
            event_type="input.resolved",
            data={
                "question_id": str(question.pk),
                "tool_call_id": question.tool_call_id,
                "status": status,
                "answer": answer,
                "answered_by": getattr(answered_by, "email", None),
                "answered_at": now.isoformat(),
            },
        )
    return True


class QuestionUnanswered(Exception):
    """The call's question has no answer to give; the message is for the model."""


def question_answer_for_call(*, run_id: Any, tool_call_id: str) -> str:
    """The tool result of an ask_user call: the user's exact answer, or that nobody answered."""
    question = UserQuestion.objects.filter(run_id=run_id, tool_call_id=tool_call_id).first()
    if question is None:
        raise QuestionUnanswered("the question was not asked")
    if question.status == QuestionStatus.ANSWERED:
        return question.answer
    if question.status == QuestionStatus.EXPIRED:
        return NO_ANSWER_RESULT
    raise QuestionUnanswered("the user has not answered yet")
