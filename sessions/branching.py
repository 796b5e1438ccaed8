"""Writes that branch a conversation: regenerate an answer, show another branch.

Editing a message and sending it again is a post with the edited message's parent
(``session_post_message(parent_id=…)``). The tree itself is read in sessions.branches.
"""

from uuid import UUID

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from sessions.branches import conversation_tree
from sessions.models import Message, MessageRole, Run, Session
from sessions.permissions import require_session_owner_or_admin
from sessions.selectors import LANE_STATUSES, lane_state_for
from sessions.services import queue_run
from sessions.tasks import require_run_queue
from tenants.actors import Actor
from tenants.quotas import check_post_message_quotas


class AnswerInProgress(Exception):
    """The message's turn is still queued or being answered: there is nothing to regenerate yet."""

    def __init__(self, run_id: UUID) -> None:
        super().__init__(f"run {run_id} still answers this message")
        self.run_id = run_id


def _answered_message(message: Message) -> Message:
    """The user message a regenerate answers again: the message itself, or the one its answer answers."""
    if message.role == MessageRole.USER:
        return message
    if message.role == MessageRole.ASSISTANT and message.run is not None and message.run.user_message:
        return message.run.user_message
    raise ValidationError({"message": ["Only a user message or an answer can be regenerated."]})


def message_regenerate(*, actor: Actor, message: Message) -> tuple[Message, Run]:
    """A new run answering the same user message; its answer is a sibling of the earlier ones,
    and the session shows it. Refused (``AnswerInProgress``) while a run of that message is in the lane.
    """
    session = message.session
    require_session_owner_or_admin(actor, session)
    user_message = _answered_message(message)
    in_lane = Run.objects.filter(user_message=user_message, status__in=LANE_STATUSES).values_list(
        "id", flat=True
    )
    if (run_id := in_lane.first()) is not None:
        raise AnswerInProgress(run_id)
    if not session.agent.is_active:
        raise ValidationError({"non_field_errors": ["This session's agent is inactive."]})
    check_post_message_quotas(actor=actor)
    require_run_queue()
    lane = lane_state_for(session.pk)
    with transaction.atomic():
        run = queue_run(actor=actor, session=session, user_message=user_message, lane_is_idle=lane.is_idle)
        Session.objects.filter(pk=session.pk).update(shown_message=user_message, updated_at=timezone.now())
    return user_message, run


def session_show_branch(*, actor: Actor, session: Session, message_id: UUID) -> Session:
    """Show the branch through ``message_id`` (continued by its newest replies) from now on."""
    require_session_owner_or_admin(actor, session)
    if message_id not in conversation_tree(session.pk).nodes:
        raise ValidationError({"message_id": ["No such message in this conversation."]})
    Session.objects.filter(pk=session.pk).update(shown_message_id=message_id)
    session.shown_message_id = message_id
    return session
