from dataclasses import dataclass
from functools import cache
from uuid import UUID

from django.db import connection
from django.db.models import F, Prefetch, QuerySet
from django.http import Http404

from agents.models import Agent
from core.prepared import read_in_one_round_trip
from core.rows import column_count, column_list, instance_from_row
from sessions.models import Message, Run, RunEvent, RunStatus, Session
from sessions.state import ACTIVE_RUN_STATUSES
from tenants.actors import Actor
from tenants.quotas import usage_from_row, usage_statement
from tools.models import AgentTool, ToolPolicy


def _uuid_or_404(value: UUID | str) -> UUID:
    try:
        return UUID(str(value))
    except ValueError as error:
        raise Http404("not found") from error


LANE_STATUSES = [RunStatus.QUEUED, *ACTIVE_RUN_STATUSES]


def session_list_for_actor(*, actor: Actor) -> QuerySet[Session]:
    lane_runs = (
        Run.objects.filter(status__in=LANE_STATUSES)
        .order_by("created_at", "id")
        .only("id", "session_id", "status", "created_at")
    )
    return (
        Session.objects.filter(tenant=actor.tenant)
        .select_related("agent", "created_by")
        .prefetch_related(Prefetch("runs", queryset=lane_runs, to_attr="lane_runs"))
        .order_by("-updated_at", "id")
    )


def session_get_for_actor(*, actor: Actor, session_id: UUID | str) -> Session:
    """The actor's tenant's session; a missing one and another tenant's both raise 404."""
    try:
        return session_list_for_actor(actor=actor).get(pk=_uuid_or_404(session_id))
    except Session.DoesNotExist as error:
        raise Http404("session not found") from error


@dataclass(frozen=True)
class LaneState:
    """The session's lane as a post found it; the worker's claim checks again."""

    active_run_id: UUID | None
    is_idle: bool  # nothing queued or active


def lane_state_for(session_id: UUID) -> LaneState:
    lane = list(
        Run.objects.filter(session_id=session_id, status__in=LANE_STATUSES)
        .order_by("created_at", "id")
        .values_list("id", "status")
    )
    active = next((run_id for run_id, status in lane if status in ACTIVE_RUN_STATUSES), None)
    return LaneState(active_run_id=active, is_idle=not lane)


def _joined_ids(column: str) -> str:
    """An aggregate of ``column``'s values as one comma-separated string."""
    if connection.vendor == "postgresql":
        return f"STRING_AGG({column}::text, ',')"
    return f"GROUP_CONCAT({column}, ',')"


@cache
def _posting_query() -> str:
    runs = Run._meta.db_table
    active = ", ".join(["%s"] * len(ACTIVE_RUN_STATUSES))
    lane = ", ".join(["%s"] * len(LANE_STATUSES))
    return (
        f"SELECT {column_list(Session, 's')}, {column_list(Agent, 'a')}, {column_list(ToolPolicy, 'p')},"  # noqa: S608
        f" (SELECT r.id FROM {runs} r WHERE r.session_id = s.id AND r.status IN ({active})"
        "   ORDER BY r.created_at, r.id LIMIT 1),"
        f" EXISTS (SELECT 1 FROM {runs} r WHERE r.session_id = s.id AND r.status IN ({lane})),"
        f" (SELECT {_joined_ids('t.tool_id')} FROM {AgentTool._meta.db_table} t WHERE t.agent_id = a.id)"
        f" FROM {Session._meta.db_table} s JOIN {Agent._meta.db_table} a ON a.id = s.agent_id"
        f" LEFT JOIN {ToolPolicy._meta.db_table} p ON p.agent_id = a.id"
        " WHERE s.id = %s AND s.tenant_id = %s"
    )


def session_get_for_posting(*, actor: Actor, session_id: UUID | str) -> Session:
    """The session a message is posted to, with its agent, the agent's tool policy, the lane,
    and the actor's quota usage (``Session.quota_usage``).

    What every message waits for, so one hand-written statement (``tests/test_runs_api.py``
    pins it to the ORM's objects); 404 for a missing session and another tenant's alike.
    """
    pk_field = Session._meta.pk
    assert pk_field is not None
    params = [
        *(str(status) for status in ACTIVE_RUN_STATUSES),
        *(str(status) for status in LANE_STATUSES),
        pk_field.get_db_prep_value(_uuid_or_404(session_id), connection),
        pk_field.get_db_prep_value(actor.tenant.pk, connection),
    ]
    # The quota counts the post checks next come back in the same round trip.
    session_rows, usage_rows = read_in_one_round_trip([(_posting_query(), params), usage_statement(actor)])
    if not session_rows:
        raise Http404("session not found")
    row = session_rows[0]
    session_end = column_count(Session)
    agent_end = session_end + column_count(Agent)
    policy_end = agent_end + column_count(ToolPolicy)
    session = instance_from_row(Session, row[:session_end])
    session.agent = instance_from_row(Agent, row[session_end:agent_end])
    policy_row = row[agent_end:policy_end]
    policy = None if policy_row[0] is None else instance_from_row(ToolPolicy, policy_row)
    Agent.tool_policy.related.set_cached_value(session.agent, policy)
    active_run_id = None if row[policy_end] is None else UUID(str(row[policy_end]))
    session.lane_state = LaneState(active_run_id=active_run_id, is_idle=not row[policy_end + 1])
    assigned = row[policy_end + 2].split(",") if row[policy_end + 2] else []
    session.agent.assigned_tool_ids = sorted(str(UUID(tool_id)) for tool_id in assigned)
    session.quota_usage = usage_from_row(usage_rows[0])
    return session


def message_list_for_session(*, session: Session) -> QuerySet[Message]:
    # Queued messages have no position yet: they join the transcript when their run starts.
    # Executors' prompts and turns belong to their runs (see the run's events), not the conversation.
    return (
        Message.objects.filter(session=session)
        .exclude(run__parent_run__isnull=False)
        .order_by(F("position").asc(nulls_last=True), "created_at")
    )


def run_list_for_actor(*, actor: Actor) -> QuerySet[Run]:
    return Run.objects.filter(tenant=actor.tenant)


def run_get_for_actor(*, actor: Actor, run_id: UUID | str) -> Run:
    try:
        return run_list_for_actor(actor=actor).get(pk=_uuid_or_404(run_id))
    except Run.DoesNotExist as error:
        raise Http404("run not found") from error


def queued_runs_for_session(*, session: Session) -> QuerySet[Run]:
    return Run.objects.filter(session=session, status=RunStatus.QUEUED).order_by("created_at", "id")


def events_for_run(*, run: Run, after_seq: int = 0) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(run=run, seq__gt=after_seq).order_by("seq")


def events_for_session(*, session: Session, after_seq: int = 0) -> QuerySet[RunEvent]:
    return RunEvent.objects.filter(session=session, seq__gt=after_seq).order_by("seq")
