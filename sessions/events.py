"""Events: numbered per session, stored as RunEvents, announced on the channel layer.

The store is the truth; the announcement is a fast path. Subscribers that miss an
announcement (or have no cross-process layer) read the store by sequence number.
"""

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any
from uuid import UUID

from django.db import DatabaseError, transaction
from django.utils import timezone

from core.redaction import redact_tool_arguments
from sessions.models import RunEvent, Session
from sessions.publisher import publish
from sessions.sequences import next_session_number
from sessions.statements.writes import insert_rows

logger = logging.getLogger(__name__)

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
        "input.required",
        "input.resolved",
        "plan.created",
        "plan.updated",
        "compaction",
        "usage",
        "error",
        "artifact.created",
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


# What a stored event row holds, in the order sessions.statements.writes.insert_rows writes it.
EVENT_COLUMNS = ("session_id", "run_id", "seq", "type", "data", "created_at")

# Events whose data can carry a model's tool arguments (which may hold secrets).
ARGUMENT_BEARING_EVENTS = frozenset(
    {"tool.call", "message.completed", "approval.required", "approval.resolved"}
)


def new_event(
    *, session_id: UUID, run_id: UUID | None, event_type: str, data: dict[str, Any]
) -> "PendingEvent":
    """The one way to make an event: its type must be in the contract, and tool arguments named
    like secrets are masked before anything stores or sends them."""
    if event_type not in EVENT_TYPES:
        raise ValueError(f"unknown event type {event_type!r}")
    if event_type in ARGUMENT_BEARING_EVENTS:
        data = redact_tool_arguments(data)
    return PendingEvent(session_id, run_id, event_type, data, timezone.now())


def emit_event(*, session_id: UUID, run_id: UUID | None, event_type: str, data: dict[str, Any]) -> None:
    """Store the event under the session's next seq and announce it once committed.

    Inside ``events_batched`` the event waits for the block's end (or ``flush_batched_events``)
    and is stored with the others of the block.
    """
    event = new_event(session_id=session_id, run_id=run_id, event_type=event_type, data=data)
    pending = _batch.get()
    if pending is not None:
        pending.append(event)
    else:
        _store([event])


@dataclass(frozen=True)
class PendingEvent:
    session_id: UUID
    run_id: UUID | None
    type: str
    data: dict[str, Any]
    created_at: datetime


_batch: ContextVar[list[PendingEvent] | None] = ContextVar("agentry_event_batch", default=None)


@contextmanager
def events_batched() -> Iterator[None]:
    """Store the events emitted inside together when the block ends: one statement, not one each.

    For code that does not wait in between (a step's bookkeeping, a state change and its
    audit events); anything that waits must flush first, or subscribers see the events late.
    A nested block joins the outer one.
    """
    if _batch.get() is not None:
        yield
        return
    pending: list[PendingEvent] = []
    token = _batch.set(pending)
    try:
        yield
    except BaseException:
        _batch.reset(token)
        _store_after_failure(pending)
        raise
    _batch.reset(token)
    if pending:
        _store(pending)


def _store_after_failure(pending: list[PendingEvent]) -> None:
    """The block raised: keep what it emitted if the database still can, never hide the error."""
    if not pending:
        return
    try:
        _store(pending)
    except (DatabaseError, Session.DoesNotExist):
        logger.warning("could not store %d events of a failed block", len(pending), exc_info=True)


def flush_batched_events() -> None:
    """Store what the current batch holds now, e.g. inside the transaction its rows belong to."""
    pending = _batch.get()
    if pending:
        _store(list(pending))
        pending.clear()


def _store(events: list[PendingEvent]) -> None:
    """Number and insert the events, in order, per session; announce them after commit."""
    by_session: dict[UUID, list[PendingEvent]] = {}
    for event in events:
        by_session.setdefault(event.session_id, []).append(event)
    for session_id, session_events in by_session.items():
        with transaction.atomic(savepoint=False):
            stored = _insert_events_after_numbering(session_id, session_events)
        transaction.on_commit(partial(_publish_all, session_id, stored))


def _publish_all(session_id: UUID, events: list[RunEvent]) -> None:
    publish(session_group_name(session_id), [event_envelope(event) for event in events])


def _insert_events_after_numbering(session_id: UUID, events: list[PendingEvent]) -> list[RunEvent]:
    last = next_session_number(session_id=session_id, counter="last_event_seq", count=len(events))
    rows = _run_events(session_id, events, sequence_numbers=range(last - len(events) + 1, last + 1))
    insert_rows(RunEvent, EVENT_COLUMNS, ([getattr(row, name) for name in EVENT_COLUMNS] for row in rows))
    return rows


def _run_events(
    session_id: UUID, events: list[PendingEvent], *, sequence_numbers: Sequence[int]
) -> list[RunEvent]:
    return [
        RunEvent(
            session_id=session_id,
            run_id=event.run_id,
            seq=seq,
            type=event.type,
            data=event.data,
            created_at=event.created_at,
        )
        for seq, event in zip(sequence_numbers, events, strict=True)
    ]
