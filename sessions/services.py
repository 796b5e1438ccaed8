"""Writes to sessions and runs, shared by the API, the pages and the websocket."""

from typing import Any

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from agents.models import Agent
from sessions.events import emit_event
from sessions.execution import run_finish
from sessions.models import Message, MessageRole, Run, RunStatus, Session, StopReason
from sessions.state import ACTIVE_RUN_STATUSES, TERMINAL_RUN_STATUSES, StaleTransition, run_transition
from sessions.tasks import dispatch_on_commit
from tenants.actors import Actor
from tenants.models import Role

MAX_MESSAGE_CHARACTERS = 100_000


def _require_role(actor: Actor, role: str) -> None:
    if not actor.can(role):
        raise PermissionDenied("Your role does not allow this action.")


def _require_session_owner_or_admin(actor: Actor, session: Session) -> None:
    """Members manage their own sessions; admins and owners manage every session."""
    _require_role(actor, Role.MEMBER)
    if session.created_by_id != actor.user_id and not actor.can(Role.ADMIN):
        raise PermissionDenied("Only the session's creator or an admin may do this.")


def session_create(*, actor: Actor, agent: Agent, title: str = "") -> Session:
    _require_role(actor, Role.MEMBER)
    if not agent.is_active:
        raise ValidationError({"agent": ["This agent is inactive."]})
    return Session.objects.create(tenant=actor.tenant, agent=agent, created_by=actor.user, title=title.strip())


def session_delete(*, actor: Actor, session: Session) -> None:
    _require_session_owner_or_admin(actor, session)
    if session.runs.filter(status__in=ACTIVE_RUN_STATUSES).exists():
        raise ValidationError({"non_field_errors": ["Cancel the session's active run before deleting it."]})
    session.delete()


def agent_config_snapshot(agent: Agent) -> dict[str, Any]:
    return {
        "agent_id": str(agent.pk),
        "name": agent.name,
        "goal": agent.goal,
        "system_prompt": agent.system_prompt,
        "model_provider": agent.model_provider,
        "model_name": agent.effective_model_name,
        "temperature": agent.temperature if agent.model_provider != "offline" else None,
        "max_steps": agent.max_steps,
        "max_tokens": agent.max_tokens,
    }


def session_post_message(*, actor: Actor, session: Session, content: str) -> tuple[Message, Run]:
    """Store the user's message and a queued run in one transaction; dispatch on commit."""
    _require_session_owner_or_admin(actor, session)
    text = content.strip()
    if not text:
        raise ValidationError({"content": ["Message cannot be empty."]})
    if len(content) > MAX_MESSAGE_CHARACTERS:
        raise ValidationError({"content": [f"Ensure this field has no more than {MAX_MESSAGE_CHARACTERS} characters."]})
    agent = session.agent
    if not agent.is_active:
        raise ValidationError({"non_field_errors": ["This session's agent is inactive."]})
    with transaction.atomic():
        message = Message.objects.create(
            tenant=session.tenant, session=session, position=None, role=MessageRole.USER,
            content=[{"type": "text", "text": content}],
        )
        run = Run.objects.create(
            tenant=session.tenant, session=session, agent=agent, user_message=message, created_by=actor.user,
            agent_config=agent_config_snapshot(agent), status=RunStatus.QUEUED,
        )
        message.run = run
        message.save(update_fields=["run"])
        emit_event(session_id=session.pk, run_id=run.pk, event_type="run.queued",
                   data={"message_id": str(message.pk)})
        if not session.title:
            Session.objects.filter(pk=session.pk).update(title=text[:80])
        else:
            session.save(update_fields=["updated_at"])
        dispatch_on_commit(session_id=session.pk)
    return message, run


def run_cancel(*, actor: Actor, run: Run) -> Run:
    """Cancel a queued run at once; ask an active one to stop (its loop notices within a second)."""
    _require_session_owner_or_admin(actor, run.session)
    actor_label = f"user:{actor.user_id}"
    for _ in range(5):
        if run.status in TERMINAL_RUN_STATUSES or run.status == RunStatus.CANCELLING:
            return run
        if run.status in (RunStatus.QUEUED, RunStatus.CREATED):
            return run_finish(run, status=RunStatus.CANCELLED, stop_reason=StopReason.CANCELLED, actor=actor_label)
        try:
            return run_transition(run, RunStatus.CANCELLING, actor=actor_label)
        except StaleTransition:
            run.refresh_from_db()  # the worker moved it meanwhile; decide again from its new state
    raise StaleTransition(f"run {run.pk} kept changing while cancelling")
