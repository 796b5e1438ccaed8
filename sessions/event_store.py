"""Reading stored events by sequence number: the truth every live stream falls back on.

Synchronous selectors returning DESIGN.md §4 envelopes; async callers wrap them in
``database_sync_to_async``. Because sequence numbers commit in order (see
``sessions.sequences``), "every event after N" read at any moment is gap-free.
"""

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from sessions.events import event_envelope
from sessions.models import Run, RunEvent, Session
from sessions.state import TERMINAL_RUN_STATUSES

Envelope = dict[str, Any]

PAGE_SIZE = 500


def events_after(session_id: UUID, after_seq: int, limit: int = PAGE_SIZE) -> list[Envelope]:
    """The session's events with seq > ``after_seq``, oldest first, at most ``limit``."""
    events = RunEvent.objects.filter(session_id=session_id, seq__gt=after_seq).order_by("seq")[:limit]
    return [event_envelope(event) for event in events]


def run_events_after(run_id: UUID, after_seq: int, limit: int = PAGE_SIZE) -> list[Envelope]:
    """The run's events with seq > ``after_seq`` (session numbers), oldest first, at most ``limit``."""
    events = RunEvent.objects.filter(run_id=run_id, seq__gt=after_seq).order_by("seq")[:limit]
    return [event_envelope(event) for event in events]


def latest_event_seqs(session_ids: Iterable[UUID]) -> dict[UUID, int]:
    """The last seq handed out per session; every event up to it is committed once this is visible."""
    rows = Session.objects.filter(pk__in=list(session_ids)).values_list("pk", "last_event_seq")
    return {session_id: seq for session_id, seq in rows}


def latest_event_seq(session_id: UUID) -> int:
    return latest_event_seqs([session_id]).get(session_id, 0)


def run_is_finished(run_id: UUID) -> bool:
    return Run.objects.filter(pk=run_id, status__in=TERMINAL_RUN_STATUSES).exists()
