"""Events: numbered per session, stored as RunEvents, announced on the channel layer.

The store is the truth; the announcement is a fast path. Subscribers that miss an
announcement (or have no cross-process layer) read the store by sequence number.
"""

import json
from datetime import datetime
from typing import Any
from uuid import UUID

from django.core.serializers.json import DjangoJSONEncoder
from django.db import connection, transaction
from django.utils import timezone

from sessions.models import RunEvent, Session
from sessions.publisher import publish_after_commit
from sessions.sequences import next_session_number

EVENT_TYPES = frozenset(
    {
        "run.queued",
        "run.started",
        "run.status",
        "run.completed",
        "run.failed",
        "run.cancelled",
        "run.timeout",
        "step.started",
        "step.completed",
        "message.started",
        "text.delta",
        "reasoning.delta",
        "message.completed",
        "tool.call",
        "tool.result",
        "approval.required",
        "approval.resolved",
        "plan.created",
        "plan.updated",
        "compaction",
        "usage",
        "error",
    }
)


def session_group_name(session_id: UUID | str) -> str:
    return f"session.{UUID(str(session_id)).hex}"


def _iso(moment: datetime) -> str:
    return moment.isoformat().replace("+00:00", "Z")


def event_envelope(event: RunEvent) -> dict[str, Any]:
    return {
        "seq": event.seq,
        "session_id": str(event.session_id),
        "run_id": str(event.run_id) if event.run_id else None,
        "type": event.type,
        "ts": _iso(event.created_at),
        "data": event.data,
    }


def emit_event(*, session_id: UUID, run_id: UUID | None, event_type: str, data: dict[str, Any]) -> RunEvent:
    """Store the event under the session's next seq and announce it once committed."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    # No savepoint when nested: the event belongs to its caller's transaction either way.
    with transaction.atomic(savepoint=False):
        if connection.vendor == "postgresql":
            event = _insert_numbered_event(session_id, run_id, event_type, data)
        else:
            seq = next_session_number(session_id=session_id, counter="last_event_seq")
            event = RunEvent.objects.create(
                session_id=session_id, run_id=run_id, seq=seq, type=event_type, data=data
            )
        publish_after_commit(session_group_name(session_id), event_envelope(event))
    return event


def _insert_numbered_event(
    session_id: UUID, run_id: UUID | None, event_type: str, data: dict[str, Any]
) -> RunEvent:
    """PostgreSQL: take the seq and insert the event in one statement (one round trip).

    The UPDATE in the CTE locks the session row exactly as ``next_session_number`` does.
    """
    session_table, event_table = Session._meta.db_table, RunEvent._meta.db_table
    created_at = timezone.now()
    with connection.cursor() as cursor:
        cursor.execute(
            f"WITH numbered AS (UPDATE {session_table} SET last_event_seq = last_event_seq + 1"  # noqa: S608
            f" WHERE id = %s RETURNING last_event_seq)"
            f" INSERT INTO {event_table} (session_id, run_id, seq, type, data, created_at)"
            f" SELECT %s, %s, numbered.last_event_seq, %s, %s::jsonb, %s FROM numbered"
            f" RETURNING id, seq",
            [session_id, session_id, run_id, event_type, json.dumps(data, cls=DjangoJSONEncoder), created_at],
        )
        row = cursor.fetchone()
    if row is None:
        raise Session.DoesNotExist(f"session {session_id} does not exist")
    return RunEvent(
        id=row[0],
        session_id=session_id,
        run_id=run_id,
        seq=row[1],
        type=event_type,
        data=data,
        created_at=created_at,
    )
