"""The session lane: one active run per session, queued runs start in arrival order.

Queued runs live in the database, so nothing is lost when a process restarts; the
django-q2 task is only the nudge that makes a worker look.
"""

import json
import logging
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Case, Q, When
from django.utils import timezone

from core.prepared import transaction_in_round_trips, write_in_one_transaction
from core.rows import column_count, column_list, instance_from_row
from memory.models import Memory, MemoryStatus
from sessions.compaction import transcript_from_rows, transcript_statement
from sessions.events import (
    NUMBERED_EVENTS_INSERT,
    PendingEvent,
    announce_on_commit,
    emit_event,
    events_batched,
    numbered_insert_params,
)
from sessions.models import Message, Run, RunPrefetch, RunStatus, Session, Step
from sessions.run_host import lease_expiry
from sessions.sequences import next_session_number
from sessions.state import ACTIVE_RUN_STATUSES, run_transition, transition_audit
from tenants.models import ProviderKey, Tenant
from tools.registry import run_tool_candidates_statement, tool_candidates_from_rows

logger = logging.getLogger(__name__)


def next_runnable_run_id(session_id: UUID) -> UUID | None:
    """The oldest queued run of the session, if no run of it is active.

    Executor child runs (``parent_run``) are outside the lane: their parent holds it.
    """
    # One query: an active run sorts first, else the oldest queued one.
    first = (
        Run.objects.filter(
            session_id=session_id,
            parent_run__isnull=True,
            status__in=[*ACTIVE_RUN_STATUSES, RunStatus.QUEUED],
        )
        .order_by(Case(When(status=RunStatus.QUEUED, then=1), default=0), "created_at", "id")
        .values_list("id", "status")
        .first()
    )
    if first is None or first[1] != RunStatus.QUEUED:
        return None
    return first[0]


@dataclass(frozen=True)
class ClaimHint:
    """What the poster knows of a run it queued on an idle lane, sent with the run's task: a
    top-level run that executes at once. With it the worker claims the run in one round trip
    instead of reading it first (PostgreSQL); the claim checks every value against the row,
    and a run that does not match is claimed the usual way."""

    session_id: UUID
    tenant_id: UUID
    agent_id: UUID
    user_message_id: UUID
    attempt: int
    assigned_tool_ids: list[str]

    def as_task_argument(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "tenant_id": str(self.tenant_id),
            "agent_id": str(self.agent_id),
            "user_message_id": str(self.user_message_id),
            "attempt": self.attempt,
            "assigned_tool_ids": list(self.assigned_tool_ids),
        }

    @classmethod
    def from_task_argument(cls, argument: dict[str, Any]) -> "ClaimHint | None":
        """None for anything malformed (a task queued by another version): the usual claim runs."""
        try:
            return cls(
                session_id=UUID(argument["session_id"]),
                tenant_id=UUID(argument["tenant_id"]),
                agent_id=UUID(argument["agent_id"]),
                user_message_id=UUID(argument["user_message_id"]),
                attempt=int(argument["attempt"]),
                assigned_tool_ids=[str(tool_id) for tool_id in argument["assigned_tool_ids"]],
            )
        except (KeyError, TypeError, ValueError):
            return None


def claim_hint_for(run: Run) -> ClaimHint | None:
    """The hint for a freshly queued run, or None when the run is not one the hint describes."""
    if (
        run.parent_run_id is not None
        or plans_first(run)
        or run.agent_id is None
        or run.user_message_id is None
    ):
        return None
    assigned = (run.agent_config.get("tool_policy") or {}).get("assigned_tool_ids")
    if not isinstance(assigned, list):
        return None
    return ClaimHint(
        session_id=run.session_id,
        tenant_id=run.tenant_id,
        agent_id=run.agent_id,
        user_message_id=run.user_message_id,
        attempt=run.attempt,
        assigned_tool_ids=[str(tool_id) for tool_id in assigned],
    )


def run_claim(*, run_id: UUID, owner: str, hint: ClaimHint | None = None) -> Run | None:
    """Take the run with a lease, if it is next in its lane: queued → planning, and on to
    executing unless it plans first (``plans_first``), in one transaction.

    Returns None when the run is not queued, another run of the session is active, or
    an older run waits: the lane dispatches those in turn.
    """
    if connection.vendor == "postgresql":
        return _claim_in_sql(run_id=run_id, owner=owner, hint=hint)
    return _claim_with_orm(run_id=run_id, owner=owner)


def _claim_with_orm(*, run_id: UUID, owner: str) -> Run | None:
    with transaction.atomic(), events_batched():
        # The tenant, session and message come along: the run's setup reads them next.
        run = Run.objects.select_related("tenant", "session", "user_message").filter(pk=run_id).first()
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
            session_id=run.session_id, run_id=run.pk, event_type="run.started", data=_started_data(run)
        )
        if not plans_first(run):
            run_transition(run, RunStatus.EXECUTING)
    return run


# PostgreSQL: the claim in three plain statements. Starting runs is the pickup every message
# waits for (POST → run.started); the ORM's query building was most of its time.
_RUNS, _SESSIONS = Run._meta.db_table, Session._meta.db_table  # table names; values go as parameters
# The hinted claim locks the session by the hint's id: a post that enqueued its run before
# committing (sessions.services) holds this row's lock until its commit, and the claim waits
# for it, where joining the run (below) would find no run yet and lock nothing.
_LOCK_SESSION = f"SELECT id FROM {_SESSIONS} WHERE id = %s FOR UPDATE"  # noqa: S608
_LOCK_SESSION_OF_RUN = (
    f"SELECT s.id FROM {_SESSIONS} s JOIN {_RUNS} r ON r.session_id = s.id"  # noqa: S608
    " WHERE r.id = %s FOR UPDATE OF s"
)
# The head of run r's lane in next_runnable_run_id's order: an active run sorts first, else the
# oldest queued one. Parameter: the lane's statuses (_lane_statuses).
_LANE_HEAD_OF_R = (
    f"(SELECT l.id FROM {_RUNS} l WHERE l.session_id = r.session_id"  # noqa: S608
    "  AND l.parent_run_id IS NULL AND l.status = ANY(%s)"
    "  ORDER BY (l.status = 'queued'), l.created_at, l.id LIMIT 1)"
)
# After the lock (a new snapshot): the run, and the head of its lane.
_READ_RUN_AND_LANE_HEAD = (
    "SELECT r.status, r.version, r.session_id, r.parent_run_id, r.user_message_id,"  # noqa: S608
    " r.agent_id, r.title, r.parent_tool_call_id, r.agent_config->>'planning_mode', r.attempt,"
    f" (SELECT m.position IS NULL FROM {Message._meta.db_table} m WHERE m.id = r.user_message_id),"
    f" {_LANE_HEAD_OF_R},"
    " r.tenant_id, r.agent_config->'tool_policy'->>'assigned_tool_ids'"
    f" FROM {_RUNS} r WHERE r.id = %s"
)
# Under the session's lock, one statement starts the run (if it is still queued at the version
# read), gives the user message the next position if it has none, and stores the start events.
_STARTED = (
    f"WITH started AS (UPDATE {_RUNS} r SET status = %s, version = version + %s, lease_owner = %s,"  # noqa: S608
    " lease_expires_at = %s, started_at = COALESCE(started_at, %s), attempt = GREATEST(attempt, 1)"
    " WHERE id = %s AND status = 'queued'"
)
_START_RUN = _STARTED + " AND version = %s RETURNING id),"
_PLACE_MESSAGE_STORE_EVENTS = (
    f" numbered AS (UPDATE {_SESSIONS} SET last_message_position = last_message_position + %s,"  # noqa: S608
    " last_event_seq = last_event_seq + %s WHERE id = %s AND EXISTS (SELECT 1 FROM started)"
    " RETURNING last_message_position, last_event_seq),"
    f" placed AS (UPDATE {Message._meta.db_table} SET position = numbered.last_message_position"
    " FROM numbered WHERE id = %s AND position IS NULL RETURNING id)" + NUMBERED_EVENTS_INSERT
)
_START_RUN_PLACE_MESSAGE_STORE_EVENTS = _START_RUN + _PLACE_MESSAGE_STORE_EVENTS
# With a ClaimHint, no read comes first: the start checks what the read would have (the run is
# what the hint says, still queued, its message unplaced, and the head of its lane, as
# _LANE_HEAD_OF_R orders it). As its own statement after the lock, it sees what the lock
# waited for.
_START_HINTED_RUN = (
    _STARTED + " AND parent_run_id IS NULL AND session_id = %s"  # noqa: S608
    " AND tenant_id = %s AND agent_id = %s AND user_message_id = %s AND attempt = %s"
    " AND COALESCE(agent_config->>'planning_mode', 'direct') <> 'plan'"
    " AND agent_config->'tool_policy'->'assigned_tool_ids' = %s::jsonb"
    f" AND EXISTS (SELECT 1 FROM {Message._meta.db_table} m WHERE m.id = r.user_message_id"
    "  AND m.position IS NULL)"
    f" AND id = {_LANE_HEAD_OF_R}"
    " RETURNING id),"
)


@dataclass(frozen=True)
class _ClaimedRun:
    """What the claim's read learned of the run, for the reads that follow it."""

    session_id: UUID
    tenant_id: UUID
    assigned_tool_ids: set[str]
    # A top-level run that executes at once reads the session's transcript first thing.
    reads_session_transcript: bool


def _claim_in_sql(*, run_id: UUID, owner: str, hint: ClaimHint | None) -> Run | None:
    run_id = UUID(str(run_id))
    if hint is not None:
        claimed_run = _claim_hinted_in_one_round_trip(run_id=run_id, owner=owner, hint=hint)
        if claimed_run is not None:
            return claimed_run
        # Not as the hint said, not next in its lane, or no longer queued: nothing was written.
    return _claim_reading_first(run_id=run_id, owner=owner)


def _lane_statuses() -> list[str]:
    return [str(status) for status in (RunStatus.QUEUED, *ACTIVE_RUN_STATUSES)]


def _claim_hinted_in_one_round_trip(*, run_id: UUID, owner: str, hint: ClaimHint) -> Run | None:
    """``BEGIN``, the lock, the checked start, the run's first reads and ``COMMIT`` in one round
    trip; None (nothing written) when the start's checks fail."""
    run = Run(
        id=run_id,
        session_id=hint.session_id,
        agent_id=hint.agent_id,
        user_message_id=hint.user_message_id,
        agent_config={"planning_mode": "direct"},
        attempt=max(hint.attempt, 1),  # as the start sets it
    )
    path: list[str] = [RunStatus.PLANNING, RunStatus.EXECUTING]
    now = timezone.now()
    events = _start_events(run, path, at=now)
    start = (
        _START_HINTED_RUN + _PLACE_MESSAGE_STORE_EVENTS,
        [
            *(path[-1], len(path), owner, lease_expiry(), now, run_id, hint.session_id, hint.tenant_id),
            *(hint.agent_id, hint.user_message_id, hint.attempt, json.dumps(hint.assigned_tool_ids)),
            _lane_statuses(),
            *(1, len(events), hint.session_id, hint.user_message_id),
            *numbered_insert_params(hint.session_id, events),
        ],
    )
    claimed = _ClaimedRun(
        session_id=hint.session_id,
        tenant_id=hint.tenant_id,
        assigned_tool_ids=set(hint.assigned_tool_ids),
        reads_session_transcript=True,
    )
    _locked, started, *loaded = write_in_one_transaction(
        [(_LOCK_SESSION, [hint.session_id]), start, *_claimed_run_statements(run_id, claimed)]
    )
    sequence_numbers = [seq for (seq,) in started]
    if not sequence_numbers:
        return None
    announce_on_commit(hint.session_id, events, sequence_numbers)
    return _claimed_run_from_rows(loaded, claimed)


def _claim_reading_first(*, run_id: UUID, owner: str) -> Run | None:
    """The claim in two round trips: ``BEGIN``, the lock and the read; then the start, the run's
    first reads (``_claimed_run_statements``) and ``COMMIT``. The start's events are announced after."""
    lane_statuses = _lane_statuses()
    with transaction_in_round_trips() as round_trips:
        # Locking the session row keeps two workers from starting two runs of one lane. The read
        # goes out with the lock (and BEGIN) in one round trip, but the server runs it after the
        # lock is held, with a snapshot of its own: it sees whatever the lock waited for.
        locked, read = round_trips.run(
            [
                (_LOCK_SESSION_OF_RUN, [run_id]),
                (_READ_RUN_AND_LANE_HEAD, [lane_statuses, run_id]),
            ]
        )
        if not locked or not read:
            return None  # rolled back: nothing was written
        row = read[0]
        status, version, session_id, parent_run_id, user_message_id, agent_id = row[:6]
        title, tool_call_id, planning_mode, attempt, message_needs_position, lane_head = row[6:12]
        tenant_id, assigned_tool_ids = row[12:]
        if status != RunStatus.QUEUED or (parent_run_id is None and lane_head != run_id):
            return None
        # What plans_first and _started_data read, without loading the whole run.
        run = Run(
            id=run_id,
            session_id=session_id,
            parent_run_id=parent_run_id,
            user_message_id=user_message_id,
            agent_id=agent_id,
            title=title,
            parent_tool_call_id=tool_call_id,
            agent_config={"planning_mode": planning_mode or "direct"},
            attempt=max(attempt, 1),  # as the start sets it
        )
        path: list[str] = [RunStatus.PLANNING]
        if not plans_first(run):
            path.append(RunStatus.EXECUTING)
        now = timezone.now()
        events = _start_events(run, path, at=now)
        start = (
            _START_RUN_PLACE_MESSAGE_STORE_EVENTS,
            [
                *(path[-1], len(path), owner, lease_expiry(), now, run_id, version),
                *(1 if message_needs_position else 0, len(events), session_id),
                user_message_id,
                *numbered_insert_params(session_id, events),
            ],
        )
        # The run's first reads ride with the start, after it (they see the placed message).
        claimed = _ClaimedRun(
            session_id=session_id,
            tenant_id=tenant_id,
            assigned_tool_ids=set(json.loads(assigned_tool_ids or "[]")),
            reads_session_transcript=parent_run_id is None and path[-1] == RunStatus.EXECUTING,
        )
        started, *loaded = round_trips.run([start, *_claimed_run_statements(run_id, claimed)], commit=True)
        sequence_numbers = [seq for (seq,) in started]
        if not sequence_numbers:  # the run moved since it was read: nothing was written
            return None
        announce_on_commit(session_id, events, sequence_numbers)
    return _claimed_run_from_rows(loaded, claimed)


def _start_events(run: Run, path: list[str], *, at: datetime) -> list[PendingEvent]:
    """The same events as run_transition and the ORM claim: each move audited, then run.started."""
    events = []
    for index, (from_status, to_status) in enumerate(zip([RunStatus.QUEUED, *path], path, strict=False)):
        audit = transition_audit(from_status, to_status, actor="system")
        events.append(PendingEvent(run.session_id, run.pk, "run.status", audit, at))
        if index == 0:
            events.append(PendingEvent(run.session_id, run.pk, "run.started", _started_data(run), at))
    return events


def plans_first(run: Run) -> bool:
    """Top-level runs of ``plan`` agents plan before executing (an ``auto`` agent's model decides
    in its loop: sessions.planning.routing).

    Executors (``parent_run``) never plan: depth is limited to one level.
    """
    return run.parent_run_id is None and run.agent_config.get("planning_mode") == "plan"


def _started_data(run: Run) -> dict[str, object]:
    """A child run names its parent and its task, so a client can show it apart from the answer."""
    data: dict[str, object] = {
        "attempt": run.attempt,
        "agent_id": str(run.agent_id) if run.agent_id else None,
    }
    if run.parent_run_id is not None:
        data.update(parent_run_id=str(run.parent_run_id), title=run.title)
        if run.parent_tool_call_id:
            data["tool_call_id"] = run.parent_tool_call_id
    return data


def _place_user_message(run: Run) -> None:
    """A queued message joins the transcript when its run starts, after earlier answers.

    (The PostgreSQL claim does this in its start statement: ``_START_RUN_PLACE_MESSAGE_STORE_EVENTS``.)
    """
    if run.user_message_id is None:
        return
    message = Message.objects.filter(pk=run.user_message_id, position__isnull=True).first()
    if message is not None:
        message.position = next_session_number(session_id=run.session_id, counter="last_message_position")
        message.save(update_fields=["position"])


def runs_to_dispatch(session_id: UUID) -> tuple[list[UUID], UUID | None]:
    """In one query: the session's queued executor runs (they start at once, beside their parent)
    and its lane's next run, as ``next_runnable_run_id`` picks it."""
    rows = list(
        Run.objects.filter(session_id=session_id)
        .filter(
            Q(parent_run__isnull=False, status=RunStatus.QUEUED)
            | Q(parent_run__isnull=True, status__in=[*ACTIVE_RUN_STATUSES, RunStatus.QUEUED])
        )
        .order_by("created_at", "id")
        .values_list("id", "status", "parent_run_id")
    )
    children = [run_id for run_id, _status, parent_id in rows if parent_id is not None]
    lane = [(run_id, status) for run_id, status, parent_id in rows if parent_id is None]
    if any(status in ACTIVE_RUN_STATUSES for _run_id, status in lane) or not lane:
        return children, None
    return children, lane[0][0]


@cache
def _claimed_run_query() -> str:
    return (
        f"SELECT {column_list(Run, 'r')}, {column_list(Tenant, 't')}, {column_list(Session, 's')},"  # noqa: S608
        f" {column_list(Message, 'm')}, {column_list(ProviderKey, 'k')},"
        f" (SELECT COUNT(*) FROM {Step._meta.db_table} st WHERE st.run_id = r.id),"
        f" EXISTS (SELECT 1 FROM {Memory._meta.db_table} mem"
        f"  WHERE mem.agent_id = r.agent_id AND mem.status = '{MemoryStatus.ACTIVE}')"
        f" FROM {_RUNS} r JOIN {Tenant._meta.db_table} t ON t.id = r.tenant_id"
        f" JOIN {_SESSIONS} s ON s.id = r.session_id"
        f" LEFT JOIN {Message._meta.db_table} m ON m.id = r.user_message_id"
        f" LEFT JOIN {ProviderKey._meta.db_table} k"
        "  ON k.tenant_id = r.tenant_id AND k.provider = r.agent_config->>'model_provider'"
        " WHERE r.id = %s"
    )


def _claimed_run_statements(run_id: UUID, claimed: _ClaimedRun) -> list[tuple[str, list[Any]]]:
    """The run with its tenant, session and user message, as the ORM's select_related loads them;
    also the tenant's own key for the run's provider (``Tenant.loaded_provider_keys``), the run's
    step count and whether its agent has active memories (``Run.prefetched``). With what the
    claim learned, the run's tool candidates and, for a run that executes at once, the session's
    transcript (``Run.prefetched``): the first things the run reads.
    """
    statements = [
        (_claimed_run_query(), [run_id]),
        run_tool_candidates_statement(claimed.tenant_id, claimed.assigned_tool_ids),
    ]
    if claimed.reads_session_transcript:
        statements.append(transcript_statement(session_id=claimed.session_id))
    return statements


def _claimed_run_from_rows(results: list[list[tuple[Any, ...]]], claimed: _ClaimedRun) -> Run | None:
    row = results[0][0] if results[0] else None
    if row is None:  # deleted right after its claim
        return None
    run_end = column_count(Run)
    tenant_end = run_end + column_count(Tenant)
    session_end = tenant_end + column_count(Session)
    message_end = session_end + column_count(Message)
    run = instance_from_row(Run, row[:run_end])
    run.tenant = instance_from_row(Tenant, row[run_end:tenant_end])
    run.session = instance_from_row(Session, row[tenant_end:session_end])
    message_row, key_row = row[session_end:message_end], row[message_end:-2]
    run.user_message = None if run.user_message_id is None else instance_from_row(Message, message_row)
    provider = run.agent_config.get("model_provider")
    if provider:
        key = None if key_row[0] is None else instance_from_row(ProviderKey, key_row)
        run.tenant.loaded_provider_keys = {provider: key}
    run.prefetched = RunPrefetch(step_count=row[-2], agent_has_active_memories=bool(row[-1]))
    run.prefetched.tool_candidates = tool_candidates_from_rows(results[1])
    if claimed.reads_session_transcript:
        run.prefetched.transcript = transcript_from_rows(results[2])
    return run
