"""Writes to sessions and runs, shared by the API, the pages and the websocket."""

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.utils import timezone

from agents.models import Agent
from files.selectors import session_has_searchable_files
from files.services import attachment_block, attachments_for_message
from sessions.branches import (
    SHOWN_BRANCH,
    BranchInfo,
    PostParent,
    RequestedParent,
    message_branch_info,
    parent_for_post,
)
from sessions.cancel import run_cancel
from sessions.events import emit_event
from sessions.models import IdempotencyRecord, Message, MessageRole, Run, RunStatus, Session
from sessions.permissions import require_role, require_session_owner_or_admin
from sessions.selectors import LaneState, lane_state_for
from sessions.state import ACTIVE_RUN_STATUSES
from sessions.tasks import dispatch_on_commit, enqueue_run_on_commit, require_run_queue
from tenants.actors import Actor
from tenants.models import Role
from tenants.quotas import check_post_message_quotas
from tools.registry import policy_snapshot

MAX_MESSAGE_CHARACTERS = 100_000


def session_create(*, actor: Actor, agent: Agent, title: str = "") -> Session:
    require_role(actor, Role.MEMBER)
    if not agent.is_active:
        raise ValidationError({"agent": ["This agent is inactive."]})
    return Session.objects.create(
        tenant=actor.tenant, agent=agent, created_by=actor.user, title=title.strip()
    )


def session_delete(*, actor: Actor, session: Session) -> None:
    require_session_owner_or_admin(actor, session)
    if session.runs.filter(status__in=ACTIVE_RUN_STATUSES).exists():
        raise ValidationError({"non_field_errors": ["Cancel the session's active run before deleting it."]})
    session.delete()


def session_rename(*, actor: Actor, session: Session, title: str) -> Session:
    """Renames the session; its place in the recent list stays (updated_at is for activity)."""
    require_session_owner_or_admin(actor, session)
    title = title.strip()
    if not title:
        raise ValidationError({"title": ["Give the conversation a title."]})
    max_length = Session._meta.get_field("title").max_length or 0
    if len(title) > max_length:
        raise ValidationError({"title": [f"Use at most {max_length} characters."]})
    Session.objects.filter(pk=session.pk).update(title=title)
    session.title = title
    return session


def agent_config_snapshot(agent: Agent, *, actor: Actor, searchable_files: bool) -> dict[str, Any]:
    """The agent as this run will use it, with the tool policy and the poster's role.

    ``searchable_files``: the agent has a knowledge base or the session has attachments, so
    the run is offered ``file_search``.
    """
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
        "run_timeout_seconds": agent.run_timeout_seconds,
        "context_compaction_enabled": agent.context_compaction_enabled,
        "planning_mode": agent.planning_mode,
        "tool_policy": policy_snapshot(agent),
        "actor_role": actor.role,
        "searchable_files": searchable_files,
    }


MultitaskMode = Literal["enqueue", "reject", "interrupt"]


class LaneBusy(Exception):
    """``multitask=reject`` and the session already has an active run."""

    def __init__(self, active_run_id: uuid.UUID) -> None:
        super().__init__(f"run {active_run_id} is active in this session")
        self.active_run_id = active_run_id


def _validate_message_content(content: str) -> str:
    if not content.strip():
        raise ValidationError({"content": ["Message cannot be empty."]})
    if len(content) > MAX_MESSAGE_CHARACTERS:
        raise ValidationError(
            {"content": [f"Ensure this field has no more than {MAX_MESSAGE_CHARACTERS} characters."]}
        )
    return content


@dataclass(frozen=True)
class PostedMessage:
    """A posted message, its run, and its place among its siblings (the n/m of branches)."""

    message: Message
    run: Run
    branch: BranchInfo


def _idempotent_repeat(*, actor: Actor, session: Session, key: str) -> PostedMessage | None:
    window_start = timezone.now() - timedelta(seconds=settings.IDEMPOTENCY_WINDOW_SECONDS)
    IdempotencyRecord.objects.filter(
        tenant=actor.tenant, user_id=actor.user_id, key=key, created_at__lt=window_start
    ).delete()
    record = (
        IdempotencyRecord.objects.filter(tenant=actor.tenant, user_id=actor.user_id, key=key)
        .select_related("message", "run")
        .first()
    )
    if record is None:
        return None
    if record.session_id != session.pk:
        raise ValidationError({"idempotency_key": ["This key was already used for another session."]})
    return PostedMessage(record.message, record.run, message_branch_info(record.message))


def session_post_message(
    *,
    actor: Actor,
    session: Session,
    content: str,
    multitask: MultitaskMode = "enqueue",
    idempotency_key: str | None = None,
    attachments: Sequence[uuid.UUID] = (),
    parent_id: RequestedParent = SHOWN_BRANCH,
) -> PostedMessage:
    """Store the user's message and a queued run in one transaction; dispatch on commit.

    ``attachments``: files uploaded to this session, carried by the message as references.
    ``parent_id``: the message it follows (None: a new first message), which starts a branch
    that becomes the one shown; by default it continues the branch shown (sessions.branches).

    The run waits in the session's lane behind any active or earlier queued run. A repeat
    with the same ``idempotency_key`` within the window returns the first message and run.
    """
    require_session_owner_or_admin(actor, session)
    if idempotency_key and (repeat := _idempotent_repeat(actor=actor, session=session, key=idempotency_key)):
        return repeat
    _validate_message_content(content)
    attached = attachments_for_message(session=session, file_ids=attachments)
    parent = parent_for_post(session, requested=parent_id)
    if not session.agent.is_active:
        raise ValidationError({"non_field_errors": ["This session's agent is inactive."]})
    lane = lane_state_for(session.pk)
    if lane.active_run_id is not None and multitask == "reject":
        raise LaneBusy(lane.active_run_id)
    check_post_message_quotas(actor=actor)
    require_run_queue()  # all or nothing: an unreachable broker stores nothing (503)
    posted = _store_message_and_run(
        actor=actor,
        session=session,
        content=[{"type": "text", "text": content}, *map(attachment_block, attached)],
        idempotency_key=idempotency_key,
        lane=lane,
        parent=parent,
    )
    if lane.active_run_id is not None and multitask == "interrupt":
        _interrupt_lane(actor=actor, session=session, new_run=posted.run)
    return posted


def _store_message_and_run(
    *,
    actor: Actor,
    session: Session,
    content: list[dict[str, Any]],
    idempotency_key: str | None,
    lane: LaneState,
    parent: PostParent,
) -> PostedMessage:
    """In one transaction, with the idempotency key's record when there is a key."""
    try:
        with transaction.atomic():
            message, run = _insert_message_andqueue_run(
                actor=actor, session=session, content=content, lane_is_idle=lane.is_idle, parent=parent
            )
            if idempotency_key:
                IdempotencyRecord.objects.create(
                    tenant=actor.tenant,
                    user_id=actor.user_id,
                    key=idempotency_key,
                    session=session,
                    message=message,
                    run=run,
                )
    except IntegrityError:
        # A concurrent repeat with the same key won the insert: answer with its result.
        repeat = _idempotent_repeat(actor=actor, session=session, key=idempotency_key or "")
        if repeat is None:
            raise
        return repeat
    return PostedMessage(message, run, parent.branch_of(message, run))


def _insert_message_andqueue_run(
    *,
    actor: Actor,
    session: Session,
    content: list[dict[str, Any]],
    lane_is_idle: bool,
    parent: PostParent,
) -> tuple[Message, Run]:
    """The ORM's writes of a post (inside the caller's transaction); the session titled if untitled."""
    # The run's id is known up front, so the message is written once (the foreign keys
    # between the two are checked at commit).
    run_id = uuid.uuid4()
    message = _new_user_message(session, content, run_id=run_id, parent_id=parent.parent_id)
    message.save(force_insert=True)
    run = queue_run(
        actor=actor, session=session, user_message=message, run_id=run_id, lane_is_idle=lane_is_idle
    )
    changes: dict[str, Any] = {"updated_at": timezone.now()}
    if not session.title:
        changes["title"] = _title_from(message.text)
    if parent.is_branch_start:
        changes["shown_message_id"] = message.pk
    Session.objects.filter(pk=session.pk).update(**changes)
    return message, run


def _new_user_message(
    session: Session, content: list[dict[str, Any]], *, run_id: uuid.UUID, parent_id: uuid.UUID | None
) -> Message:
    """Queued: it gets its transcript position when its run starts."""
    return Message(
        tenant_id=session.tenant_id,
        session=session,
        parent_id=parent_id,
        position=None,
        role=MessageRole.USER,
        content=content,
        run_id=run_id,
    )


def _title_from(content: str) -> str:
    """A session without a title is named after its first message."""
    return content.strip()[:80]


def queue_run(
    *,
    actor: Actor,
    session: Session,
    user_message: Message,
    retry_of: Run | None = None,
    run_id: uuid.UUID | None = None,
    lane_is_idle: bool = False,
) -> Run:
    run = _new_queued_run(
        actor=actor, session=session, user_message=user_message, run_id=run_id, retry_of=retry_of
    )
    run.save(force_insert=True)
    # On commit, the task goes out before the announcement, which only watchers await.
    _enqueue_on_commit(run, lane_is_idle=lane_is_idle)
    emit_event(session_id=session.pk, run_id=run.pk, event_type="run.queued", data=_queued_data(run))
    return run


def _new_queued_run(
    *,
    actor: Actor,
    session: Session,
    user_message: Message,
    run_id: uuid.UUID | None = None,
    retry_of: Run | None = None,
) -> Run:
    return Run(
        id=run_id or uuid.uuid4(),
        tenant_id=session.tenant_id,
        session=session,
        agent=session.agent,
        user_message=user_message,
        created_by=actor.user,
        agent_config=agent_config_snapshot(
            session.agent, actor=actor, searchable_files=session_has_searchable_files(session)
        ),
        status=RunStatus.QUEUED,
        retry_of=retry_of,
    )


def _queued_data(run: Run) -> dict[str, str]:
    data = {"message_id": str(run.user_message_id)}
    if run.retry_of_id is not None:
        data["retry_of"] = str(run.retry_of_id)
    return data


def _enqueue_on_commit(run: Run, *, lane_is_idle: bool) -> None:
    if lane_is_idle:
        enqueue_run_on_commit(run=run)  # no lane to consult: skip the dispatch's reads
    else:
        dispatch_on_commit(session_id=run.session_id)


def _interrupt_lane(*, actor: Actor, session: Session, new_run: Run) -> None:
    """Cancel the active run and everything queued before ``new_run``, so it runs next."""
    ahead = session.runs.filter(
        status__in=[*ACTIVE_RUN_STATUSES, RunStatus.QUEUED], created_at__lte=new_run.created_at
    ).exclude(pk=new_run.pk)
    for run in ahead:
        run_cancel(actor=actor, run=run)


def run_retry(*, actor: Actor, run: Run) -> Run:
    """A new run for the same user message, linked to the original, queued in the lane."""
    require_session_owner_or_admin(actor, run.session)
    if run.status not in (RunStatus.FAILED, RunStatus.CANCELLED, RunStatus.TIMEOUT):
        raise ValidationError(
            {"non_field_errors": ["Only failed, cancelled or timed-out runs can be retried."]}
        )
    if run.user_message is None:
        raise ValidationError({"non_field_errors": ["This run has no user message to answer again."]})
    if run.retries.exists():
        raise ValidationError({"non_field_errors": ["This run was already retried."]})
    check_post_message_quotas(actor=actor)
    require_run_queue()
    with transaction.atomic():
        return queue_run(actor=actor, session=run.session, user_message=run.user_message, retry_of=run)
