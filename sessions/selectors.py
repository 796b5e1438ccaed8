from dataclasses import dataclass
from uuid import UUID

from django.db.models import Exists, F, IntegerField, OuterRef, Prefetch, Q, QuerySet, Subquery, Sum, Value
from django.db.models.functions import Coalesce
from django.http import Http404

from sessions.models import Message, MessageRole, Run, RunEvent, RunStatus, Session
from sessions.state import ACTIVE_RUN_STATUSES
from sessions.statements.post_reads import lane_runs, session_for_posting
from tenants.actors import Actor


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


# A message's text sits in its JSON content blocks: a user's text is the first block (its
# attachments follow) and an assistant's follows at most a reasoning block. Looking up blocks by
# index reads the same on SQLite and PostgreSQL, where matching the whole JSON text would also
# match its keys ("type", "text").
SEARCHED_CONTENT_BLOCKS = 3
SESSION_QUERY_MAX_LENGTH = 200


def sessions_matching(sessions: QuerySet[Session], *, query: str) -> QuerySet[Session]:
    """The sessions whose title or whose user or assistant messages contain ``query``, any case."""
    query = query.strip()
    if not query:
        return sessions
    text_matches = Q()
    for index in range(SEARCHED_CONTENT_BLOCKS):
        text_matches |= Q(**{f"content__{index}__text__icontains": query})
    matching_messages = Message.objects.filter(
        text_matches, session=OuterRef("pk"), role__in=[MessageRole.USER, MessageRole.ASSISTANT]
    )
    return sessions.filter(Q(title__icontains=query) | Exists(matching_messages))


def last_used_agent_id(*, actor: Actor) -> UUID | None:
    """The agent of the actor's most recently updated session in this tenant, if any."""
    return (
        Session.objects.filter(tenant=actor.tenant, created_by_id=actor.user_id)
        .order_by("-updated_at", "id")
        .values_list("agent_id", flat=True)
        .first()
    )


def session_get_for_actor(*, actor: Actor, session_id: UUID | str) -> Session:
    """The actor's tenant's session; a missing one and another tenant's both raise 404."""
    try:
        return session_list_for_actor(actor=actor).get(pk=_uuid_or_404(session_id))
    except Session.DoesNotExist as error:
        raise Http404("session not found") from error


def _session_runs_total(field: str) -> Coalesce:
    total = (
        Run.objects.filter(session=OuterRef("pk"))
        .order_by()
        .values("session")
        .annotate(total=Sum(field))
        .values("total")
    )
    return Coalesce(Subquery(total, output_field=IntegerField()), Value(0))


def sessions_with_cost(sessions: QuerySet[Session]) -> QuerySet[Session]:
    """Each session with what all its runs cost (executors and sub-agents are runs of it too):
    ``total_cost_micros``, ``total_model_calls``, ``total_unpriced_model_calls``."""
    return sessions.annotate(
        total_cost_micros=_session_runs_total("cost_micros"),
        total_model_calls=_session_runs_total("model_calls"),
        total_unpriced_model_calls=_session_runs_total("unpriced_model_calls"),
    )


@dataclass(frozen=True)
class LaneState:
    """The session's lane as a post found it; the worker's claim checks again."""

    active_run_id: UUID | None
    is_idle: bool  # nothing queued or active


def lane_state_for(session_id: UUID) -> LaneState:
    lane = lane_runs(session_id, statuses=LANE_STATUSES)
    active = next((run_id for run_id, status in lane if status in ACTIVE_RUN_STATUSES), None)
    return LaneState(active_run_id=active, is_idle=not lane)


def session_get_for_posting(*, actor: Actor, session_id: UUID | str) -> Session:
    """The session a message is posted to, with its agent, the agent's tool policy and whether
    it has files to search; 404 for a missing session and another tenant's alike."""
    session = session_for_posting(tenant_id=actor.tenant.pk, session_id=_uuid_or_404(session_id))
    if session is None:
        raise Http404("session not found")
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
