"""The session lane: one active run per session, queued runs start in arrival order.

Queued runs live in the database, so nothing is lost when a process restarts; the
django-q2 task is only the nudge that makes a worker look.
"""

import os
import socket
import uuid
from datetime import datetime, timedelta
from uuid import UUID

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sessions.events import emit_event, events_batched
from sessions.models import Message, Run, RunStatus, Session
from sessions.sequences import next_session_number
from sessions.state import ACTIVE_RUN_STATUSES, run_transition

WORKER_IDENTITY = f"{socket.gethostname()}:{os.getpid()}"


def new_lease_owner() -> str:
    return f"{WORKER_IDENTITY}:{uuid.uuid4().hex[:8]}"


def lease_expiry() -> datetime:
    return timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)


def next_runnable_run_id(session_id: UUID) -> UUID | None:
    """The oldest queued run of the session, if no run of it is active.

    Executor child runs (``parent_run``) are outside the lane: their parent holds it.
    """
    top_level = Run.objects.filter(session_id=session_id, parent_run__isnull=True)
    if top_level.filter(status__in=ACTIVE_RUN_STATUSES).exists():
        return None
    return (
        top_level.filter(status=RunStatus.QUEUED)
        .order_by("created_at", "id")
        .values_list("id", flat=True)
        .first()
    )


def run_claim(*, run_id: UUID, owner: str) -> Run | None:
    """Take the run with a lease, if it is next in its lane: queued → planning, and on to
    executing unless it plans first (``plans_first``), in one transaction.

    Returns None when the run is not queued, another run of the session is active, or
    an older run waits: the lane dispatches those in turn.
    """
    with transaction.atomic(), events_batched():
        run = Run.objects.select_related("tenant").filter(pk=run_id).first()
        if run is None or run.status != RunStatus.QUEUED:
            return None
        # Locking the session row keeps two workers from starting two runs of one lane.
        Session.objects.select_for_update().filter(pk=run.session_id).values_list("id").get()
        if run.parent_run_id is None and next_runnable_run_id(run.session_id) != run.pk:
            return None
        now = timezone.now()
        run_transition(
            run,
            RunStatus.PLANNING,
            lease_owner=owner,
            lease_expires_at=lease_expiry(),
            started_at=run.started_at or now,
            attempt=max(run.attempt, 1),
        )
        if run.user_message_id is not None:
            _place_user_message(run)
        emit_event(
            session_id=run.session_id,
            run_id=run.pk,
            event_type="run.started",
            data={"attempt": run.attempt, "agent_id": str(run.agent_id) if run.agent_id else None},
        )
        if not plans_first(run):
            run_transition(run, RunStatus.EXECUTING)
    return run


def plans_first(run: Run) -> bool:
    """Top-level runs of planning agents route (and maybe plan) before executing.

    Executors (``parent_run``) never plan: depth is limited to one level.
    """
    return run.parent_run_id is None and run.agent_config.get("planning_mode", "direct") != "direct"


def _place_user_message(run: Run) -> None:
    """A queued message joins the transcript when its run starts, after earlier answers."""
    if run.user_message_id is None:
        return
    message = Message.objects.filter(pk=run.user_message_id, position__isnull=True).first()
    if message is not None:
        message.position = next_session_number(session_id=run.session_id, counter="last_message_position")
        message.save(update_fields=["position"])


def queued_child_run_ids(session_id: UUID) -> list[UUID]:
    """Executor runs of the session waiting for a worker; they start at once, beside their parent."""
    return list(
        Run.objects.filter(session_id=session_id, status=RunStatus.QUEUED, parent_run__isnull=False)
        .order_by("created_at", "id")
        .values_list("id", flat=True)
    )
