"""Compaction of a session's context, on the Django side (the algorithm is agents.runtime.compaction).

How a compacted context persists: stored Messages are never rewritten, so people still see the whole
conversation. Each compaction stores a ``CompactionSnapshot`` with its summary and
``replaces_up_to_position``; the model's context for later runs is the latest snapshot's note,
then the messages after that position (``session_transcript``). Snapshots of runs whose answers
left the context (failed, timed out, retried) leave it with them.

Branches (sessions.branches): a context is one path, from the conversation's start to the run's
message. A summary covers the path up to the message at ``replaces_up_to_position``, so it applies
to every branch whose path holds that message (they share the summarized prefix) and to no other.
"""

import logging
from collections.abc import Collection
from contextlib import AbstractContextManager
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.exceptions import PermissionDenied
from django.db import transaction

from agents.model_clients import model_client_for
from agents.runtime.compaction import (
    MEMORY_SAVE_TOOL,
    CompactionPolicy,
    ContextCompactor,
    compaction_note,
    with_note,
)
from agents.runtime.tokens import context_window_for
from agents.runtime.types import (
    ChatMessage,
    CompactionRecord,
    ModelRequest,
    StepKind,
    StopRequestReason,
    ToolOutcome,
    Usage,
)
from billing.meter import metered, payer_for_session
from files.context import with_attachments_resolved
from sessions.branches import run_context_path, shown_path
from sessions.events import emit_event, events_batched
from sessions.models import CompactionSnapshot, Message, MessageRole, Run, RunStatus, Session
from sessions.state import ACTIVE_RUN_STATUSES
from sessions.statements.run_reads import latest_snapshot, placed_messages
from tenants.actors import Actor
from tenants.models import Role
from tools.registry import RunToolset

logger = logging.getLogger(__name__)

ABANDONED_RUN_STATUSES = [RunStatus.FAILED, RunStatus.TIMEOUT]


# --- The context of later runs ------------------------------------------------------------------------


# The (id, position) of each placed message on a branch, from the conversation's start.
ContextPath = list[tuple[UUID, int]]


def latest_compaction(*, session_id: UUID, path_positions: Collection[int]) -> CompactionSnapshot | None:
    """The snapshot the context starts from, if any: of the branch through ``path_positions``
    (position 0, before the first message, is on every branch)."""
    return latest_snapshot(
        session_id=session_id, positions=[0, *path_positions], abandoned_statuses=ABANDONED_RUN_STATUSES
    )


def context_messages(
    *, session_id: UUID, after_position: int | None, path_ids: Collection[UUID]
) -> list[Message]:
    """Stored messages of a branch (``path_ids``) in the model's context after ``after_position``,
    in transcript order, with their role, content and position.

    Queued messages have no position yet. Answers of runs that failed, timed out or were retried
    stay stored but leave the context: they may end mid-turn, and a retry answers afresh. A branch
    holds no executor's messages: executor runs keep their own transcripts.
    """
    return placed_messages(
        session_id=session_id,
        ids=path_ids,
        after_position=after_position,
        abandoned_statuses=ABANDONED_RUN_STATUSES,
    )


def chat_message_for(message: Message) -> ChatMessage:
    return ChatMessage(
        role="assistant" if message.role == MessageRole.ASSISTANT else "user", content=list(message.content)
    )


def shown_context_path(session_id: UUID) -> ContextPath:
    """The placed messages of the branch people see."""
    session = Session.objects.only("id", "shown_message_id").get(pk=session_id)
    tree, path = shown_path(session)
    return [(message_id, position) for message_id in path if (position := tree.nodes[message_id].position)]


def session_transcript(*, session_id: UUID) -> list[ChatMessage]:
    """The model's context on the branch people see (what a manual compaction summarizes)."""
    return path_transcript(session_id=session_id, path=shown_context_path(session_id))


def run_transcript(run: Run) -> list[ChatMessage]:
    """The model's context for a run: its branch up to the run's latest message."""
    return path_transcript(session_id=run.session_id, path=run_context_path(run))


def path_transcript(*, session_id: UUID, path: ContextPath) -> list[ChatMessage]:
    """The model's context on a branch: the latest compaction's note, then the messages it did not replace."""
    snapshot = latest_compaction(session_id=session_id, path_positions=[position for _id, position in path])
    messages = context_messages(
        session_id=session_id,
        after_position=snapshot.replaces_up_to_position if snapshot else None,
        path_ids=[message_id for message_id, _position in path],
    )
    transcript = [chat_message_for(message) for message in messages if message.role != MessageRole.SYSTEM]
    transcript = with_attachments_resolved(transcript, session_id=session_id)
    if snapshot is None:
        return transcript
    return with_note(compaction_note(snapshot.summary), transcript)


# --- Policy -------------------------------------------------------------------------------------------


def compaction_policy(
    *, model_name: str, context_window_tokens: int | None = None, is_memory_flush_enabled: bool = True
) -> CompactionPolicy:
    return CompactionPolicy(
        context_window_tokens=context_window_for(model_name, override=context_window_tokens),
        threshold=float(getattr(settings, "CONTEXT_COMPACTION_THRESHOLD", 0.85)),
        keep_recent_messages=int(getattr(settings, "CONTEXT_COMPACTION_KEEP_MESSAGES", 4)),
        keep_recent_share=float(getattr(settings, "CONTEXT_COMPACTION_KEEP_SHARE", 0.3)),
        summary_max_tokens=int(getattr(settings, "CONTEXT_COMPACTION_SUMMARY_MAX_TOKENS", 4096)),
        is_memory_flush_enabled=is_memory_flush_enabled,
    )


def compaction_policy_for(run: Run, toolset: RunToolset | None = None) -> CompactionPolicy | None:
    """The run's compaction policy, or None when its agent switched compaction off.

    The flag comes from the run's agent snapshot; runs snapshotted before the flag existed read
    the agent. The memory flush runs only when ``memory_save`` may run without approval: a
    compaction cannot wait for a person.
    """
    config = run.agent_config
    is_enabled = config.get("context_compaction_enabled")
    if is_enabled is None:
        is_enabled = run.agent.context_compaction_enabled if run.agent is not None else True
    if not is_enabled:
        return None
    decision = toolset.decisions.get(MEMORY_SAVE_TOOL) if toolset is not None else None
    return compaction_policy(
        model_name=config["model_name"],
        context_window_tokens=config.get("context_window_tokens"),
        is_memory_flush_enabled=bool(decision and decision.is_allowed and not decision.requires_approval),
    )


# --- Snapshots ----------------------------------------------------------------------------------------


def _replaced_up_to(*, session: Session, kept_tail: list[ChatMessage], path: ContextPath) -> int | None:
    """The last position on the branch the summary replaces: the one before the stored kept messages.

    None when the kept messages do not match the stored ones (the context was not built from the
    store): the snapshot is then kept as a record but does not change later contexts. Stored
    attachments are compared as the context had them: resolved (``files.context``).
    """
    session_id = session.pk
    snapshot = latest_compaction(session_id=session_id, path_positions=[position for _id, position in path])
    stored = [
        message
        for message in context_messages(
            session_id=session_id,
            after_position=snapshot.replaces_up_to_position if snapshot else None,
            path_ids=[message_id for message_id, _position in path],
        )
        if message.role != MessageRole.SYSTEM
    ]
    if not kept_tail:
        return stored[-1].position if stored else None
    newest = stored[-len(kept_tail) :]
    as_stored = [chat_message_for(message) for message in newest]
    if with_attachments_resolved(as_stored, session_id=session_id) != kept_tail:
        logger.warning("session %s: compacted context does not match the stored messages", session_id)
        return None
    # The message before the first kept one on this branch (0: before the conversation's start).
    ids = [message_id for message_id, _position in path]
    at = ids.index(newest[0].pk)
    return path[at - 1][1] if at > 0 else 0


def compaction_snapshot_create(
    *, session: Session, run: Run | None, record: CompactionRecord, path: ContextPath
) -> CompactionSnapshot:
    return CompactionSnapshot.objects.create(
        tenant_id=session.tenant_id,
        session=session,
        run=run,
        reason=record.reason,
        summary=record.summary,
        is_fallback=record.is_fallback,
        replaces_up_to_position=_replaced_up_to(session=session, kept_tail=record.kept_tail, path=path),
        tokens_before=record.tokens_before,
        tokens_after=record.tokens_after,
        messages_before=record.messages_before,
        messages_after=record.messages_after,
        input_tokens=record.usage.input_tokens,
        output_tokens=record.usage.output_tokens,
    )


# --- Compacting on demand -----------------------------------------------------------------------------


class SessionBusy(Exception):
    def __init__(self, active_run: Run) -> None:
        super().__init__(f"run {active_run.pk} is active in this session")
        self.active_run = active_run


class NothingToCompact(Exception):
    """The context has no older turns that a summary could replace."""


def _active_run(session: Session) -> Run | None:
    return Run.objects.filter(session=session, status__in=ACTIVE_RUN_STATUSES).first()


def _require_creator_or_admin(actor: Actor, session: Session) -> None:
    """As for other session writes: members compact their own sessions, admins and owners any."""
    if not actor.can(Role.MEMBER) or (session.created_by_id != actor.user_id and not actor.can(Role.ADMIN)):
        raise PermissionDenied("Only the session's creator or an admin may do this.")


def session_compact(*, actor: Actor, session: Session) -> CompactionSnapshot:
    """Compact the session's context now with its agent's model (reason ``manual``).

    Refused while a run of the session is active (``SessionBusy``), like a message in the lane.
    A failed summary raises its ``ModelError`` and changes nothing: unlike a run, nothing forces
    this compaction, so it does not fall back to dropping turns. ``ProviderNotConfigured`` when
    the agent's provider has no key.
    """
    _require_creator_or_admin(actor, session)
    if (active := _active_run(session)) is not None:
        raise SessionBusy(active)
    agent = session.agent
    model_name = agent.effective_model_name
    model = model_client_for(tenant=session.tenant, agent_config={"model_provider": agent.model_provider})
    model = metered(model, payer_for_session(session, user_id=actor.user_id))
    recorder = SessionCompactionRecorder(session)
    compactor = ContextCompactor(
        policy=compaction_policy(model_name=model_name), model=model, recorder=recorder
    )
    # The same system prompt as a run's (sessions.execution.loop_config_for), for the token counts.
    system_prompt = agent.system_prompt
    if agent.goal:
        system_prompt = f"{system_prompt}\n\nYour goal: {agent.goal}".strip()
    request = ModelRequest(
        model=model_name,
        system=system_prompt,
        messages=session_transcript(session_id=session.pk),
        max_tokens=agent.max_tokens,
        timeout_seconds=settings.MODEL_TIMEOUT_SECONDS,
    )
    compaction = compactor.compact(request, reason="manual", is_fallback_allowed=False)
    if compaction is None or recorder.snapshot is None:
        raise NothingToCompact("There are no older turns to summarize yet.")
    return recorder.snapshot


class SessionCompactionRecorder:
    """The recorder of a compaction outside any run: no steps, one snapshot, one event.

    The snapshot is stored under the session row lock, and only if no run started meanwhile.
    """

    def __init__(self, session: Session) -> None:
        self.session = session
        self.snapshot: CompactionSnapshot | None = None
        self._step_count = 0

    def emit(self, event_type: str, data: dict[str, Any]) -> None:
        emit_event(session_id=self.session.pk, run_id=None, event_type=event_type, data=data)

    def batch(self) -> AbstractContextManager[None]:
        return events_batched()

    def start_step(self, *, kind: StepKind, input: dict[str, Any]) -> str:
        self._step_count += 1
        return f"manual-compaction-{self._step_count}"

    def complete_step(self, step_id: str, *, output: dict[str, Any], usage: Usage | None = None) -> None:
        """The usage is stored on the snapshot."""

    def fail_step(self, step_id: str, *, error: str, usage: Usage | None = None) -> None:
        """A failed summary raises to the caller."""

    def append_message(
        self, message: ChatMessage, *, usage: Usage | None = None, is_stopped: bool = False
    ) -> None:
        raise RuntimeError("a compaction outside a run appends no messages")

    def completed_tool_result(self, tool_call_id: str) -> ToolOutcome | None:
        return None

    def tool_call_was_interrupted(self, tool_call_id: str) -> bool:
        return False

    def stop_requested(self) -> StopRequestReason | None:
        return None

    def loop_ends(self, stop_reason: str) -> None:
        """A compaction's summary call ends no run."""

    def record_compaction(self, record: CompactionRecord) -> None:
        with transaction.atomic():
            # Holding the session row keeps a run from starting between the check and the snapshot.
            Session.objects.select_for_update().filter(pk=self.session.pk).values_list("id").get()
            if (active := _active_run(self.session)) is not None:
                raise SessionBusy(active)
            self.snapshot = compaction_snapshot_create(
                session=self.session, run=None, record=record, path=shown_context_path(self.session.pk)
            )
