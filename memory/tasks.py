"""django-q2 tasks for extraction, the idle-session schedule, and the on-demand request."""

import logging
from datetime import datetime, timedelta
from uuid import UUID

from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from core.tasks import enqueue_task
from memory.conf import memory_setting
from memory.extraction import ExtractionFailed, extract_memories
from sessions.models import Message, Run, RunStatus, Session
from sessions.state import ACTIVE_RUN_STATUSES
from tenants.actors import Actor
from tenants.models import Role

logger = logging.getLogger(__name__)

BUSY_RUN_STATUSES = [RunStatus.QUEUED, *ACTIVE_RUN_STATUSES]


def extract_memories_task(session_id: str) -> int:
    """Mine one session for suggestions; idempotent (messages already read are not read again)."""
    session = Session.objects.select_related("agent", "tenant").filter(pk=UUID(session_id)).first()
    if session is None:
        return 0
    try:
        return len(extract_memories(session))
    except ExtractionFailed as error:
        logger.warning("memory extraction of session %s failed: %s", session_id, error)
        return 0


def sessions_idle_for_extraction(idle_seconds: float, *, now: datetime | None = None) -> QuerySet[Session]:
    """Sessions with messages not mined yet, quiet for ``idle_seconds``, no run waiting or
    working, and not backing off after a failure; the longest idle first."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=idle_seconds)
    last_message_at = (
        Message.objects.filter(session=OuterRef("pk")).order_by("-created_at").values("created_at")
    )
    busy = Run.objects.filter(session=OuterRef("pk"), status__in=BUSY_RUN_STATUSES)
    return (
        Session.objects.filter(updated_at__lte=cutoff)
        .annotate(
            extracted_up_to=Coalesce(F("memory_extraction__last_message_position"), 0),
            last_message_at=Subquery(last_message_at[:1]),
        )
        .filter(last_message_position__gt=F("extracted_up_to"), last_message_at__lte=cutoff)
        .filter(
            Q(memory_extraction__next_attempt_at__isnull=True)
            | Q(memory_extraction__next_attempt_at__lte=now)
        )
        .exclude(Exists(busy))
        .order_by("updated_at", "id")
    )


def extract_idle_sessions() -> int:
    """The schedule's entry point: queue extraction for a batch of idle sessions."""
    idle_seconds = float(memory_setting("MEMORY_EXTRACTION_IDLE_SECONDS"))
    if idle_seconds <= 0:
        return 0
    batch = int(memory_setting("MEMORY_EXTRACTION_BATCH_SIZE"))
    session_ids = list(sessions_idle_for_extraction(idle_seconds).values_list("id", flat=True)[:batch])
    for session_id in session_ids:
        enqueue_task(extract_memories_task, str(session_id), task_name=f"extract-memories-{session_id}")
    return len(session_ids)


def memory_extraction_request(*, actor: Actor, session: Session) -> None:
    """Queue extraction of ``session`` once the transaction commits.

    Members may ask for their own sessions, admins for any: the result is only suggestions.
    """
    if not actor.can(Role.MEMBER):
        raise PermissionDenied("Your role does not allow this action.")
    if session.created_by_id != actor.user_id and not actor.can(Role.ADMIN):
        raise PermissionDenied("Only the session's creator or an admin may do this.")
    session_id = str(session.pk)
    transaction.on_commit(
        lambda: enqueue_task(extract_memories_task, session_id, task_name=f"extract-memories-{session_id}")
    )
