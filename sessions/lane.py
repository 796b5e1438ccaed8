"""The session lane: one active run per session, queued runs start in arrival order.

Queued runs live in the database, so nothing is lost when a process restarts; the
django-q2 task is only the nudge that makes a worker look.
"""

from uuid import UUID

from django.db import transaction
from django.db.models import Q, Subquery
from django.utils import timezone

from sessions.events import emit_event, events_batched
from sessions.models import Message, MessageRole, Run, RunStatus
from sessions.run_host import lease_expiry
from sessions.sequences import next_session_number
from sessions.state import ACTIVE_RUN_STATUSES, emit_run_status, run_moves
from sessions.statements.run_reads import claim_read, dispatch_candidates, lane_head
from sessions.statements.writes import update_row


def next_runnable_run_id(session_id: UUID) -> UUID | None:
    """The oldest queued run of the session, if no run of it is active.

    Executor child runs (``parent_run``) are outside the lane: their parent holds it.
    """
    first = lane_head(session_id, statuses=[*ACTIVE_RUN_STATUSES, RunStatus.QUEUED], queued=RunStatus.QUEUED)
    if first is None or first[1] != RunStatus.QUEUED:
        return None
    return first[0]


def lane_status(lane: list[Run]) -> str:
    """What a session's lane (its active and queued runs, oldest first) is doing now: idle,
    queued, running, awaiting_approval or awaiting_input."""
    active = [run for run in lane if run.status != RunStatus.QUEUED]
    if active:
        waiting = active[0].status in (RunStatus.AWAITING_APPROVAL, RunStatus.AWAITING_INPUT)
        return str(active[0].status) if waiting else "running"
    return "queued" if lane else "idle"


def run_claim(*, run_id: UUID, owner: str) -> Run | None:
    """Take the run with a lease, if it is next in its lane: queued → planning, and on to
    executing unless it plans first (``plans_first``), in one transaction.

    Returns None when the run is not queued, another run of the session is active, or
    an older run waits: the lane dispatches those in turn.
    """
    with transaction.atomic(), events_batched():
        # The tenant, session and message come along: the run's setup reads them next. Locking
        # the session row keeps two workers from starting two runs of one lane; the lane is read
        # under the lock, and the moves are guarded by the run's version.
        run = claim_read(run_id)
        if run is None or run.status != RunStatus.QUEUED:
            return None
        if run.parent_run_id is None and next_runnable_run_id(run.session_id) != run.pk:
            return None
        path = [RunStatus.PLANNING] if plans_first(run) else [RunStatus.PLANNING, RunStatus.EXECUTING]
        audits = run_moves(
            run,
            path,
            lease_owner=owner,
            lease_expires_at=lease_expiry(),
            started_at=run.started_at or timezone.now(),
            attempt=max(run.attempt, 1),
        )
        if audits is None:
            # Another worker took the run (a task delivered twice) or a cancel moved it while this
            # one waited for the session's lock: the read under the lock saw the run as it was.
            return None
        _place_user_message(run)
        emit_run_status(run, audits[0])
        emit_event(
            session_id=run.session_id, run_id=run.pk, event_type="run.started", data=_started_data(run)
        )
        for audit in audits[1:]:
            emit_run_status(run, audit)
    return run


def plans_first(run: Run) -> bool:
    """Top-level runs of ``plan`` agents plan before executing (an ``auto`` agent's model decides
    in its loop: sessions.planning.routing).

    Executors (``parent_run``) never plan: depth is limited to one level.
    """
    return run.parent_run_id is None and run.agent_config.get("planning_mode") == "plan"


def _started_data(run: Run) -> dict[str, object]:
    """A child run names its parent and its task, so a client can show it apart from the answer;
    a top-level run names its user message and, now that it is placed, the message it follows
    (a client can offer to edit it: an edit is a sibling under that parent)."""
    data: dict[str, object] = {
        "attempt": run.attempt,
        "agent_id": str(run.agent_id) if run.agent_id else None,
    }
    if run.parent_run_id is not None:
        data.update(parent_run_id=str(run.parent_run_id), title=run.title)
        if run.parent_tool_call_id:
            data["tool_call_id"] = run.parent_tool_call_id
    elif run.user_message is not None:
        parent_id = run.user_message.parent_id
        data.update(
            message_id=str(run.user_message_id), message_parent_id=str(parent_id) if parent_id else None
        )
    return data


def _place_user_message(run: Run) -> None:
    """A queued message joins the transcript when its run starts, after earlier answers
    (the claim read the message with its run), and after the end of the turn it was posted on."""
    message = run.user_message
    if message is not None and message.position is None:
        message.position = next_session_number(session_id=run.session_id, counter="last_message_position")
        if message.parent_id is not None:
            message.parent_id = _end_of_turn(message.parent_id, run=run)
        update_row(Message, message.pk, values={"position": message.position, "parent_id": message.parent_id})


def _end_of_turn(message_id: UUID, *, run: Run) -> UUID:
    """The last answer of the turn ``message_id`` belongs to, as it ended (the lane ran it before
    ``run``): a message posted while that turn was still being answered follows the whole answer.

    For a user message, its answers by runs older than ``run``; for an answer, its run's later ones.
    """
    answer_run = Message.objects.filter(pk=message_id).exclude(role=MessageRole.USER).values("run_id")
    last = (
        Message.objects.filter(session_id=run.session_id, position__isnull=False)
        .exclude(role=MessageRole.USER)
        .filter(
            Q(run__user_message_id=message_id, run__created_at__lt=run.created_at)
            | Q(run_id=Subquery(answer_run))
        )
        .order_by("-run__created_at", "-position")
        .values_list("id", flat=True)
        .first()
    )
    return last or message_id


def runs_to_dispatch(session_id: UUID) -> tuple[list[UUID], UUID | None]:
    """In one read: the session's queued executor runs (they start at once, beside their parent)
    and its lane's next run, as ``next_runnable_run_id`` picks it."""
    rows = dispatch_candidates(
        session_id, statuses=[*ACTIVE_RUN_STATUSES, RunStatus.QUEUED], queued=RunStatus.QUEUED
    )
    children = [run_id for run_id, _status, parent_id in rows if parent_id is not None]
    lane = [(run_id, status) for run_id, status, parent_id in rows if parent_id is None]
    if any(status in ACTIVE_RUN_STATUSES for _run_id, status in lane) or not lane:
        return children, None
    return children, lane[0][0]
